"""Encoders: open_clip and timm with random weights, local checkpoints, offline errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pairkit.encode.checkpoints import load_state_dict
from pairkit.encode.registry import EncoderRequest, load_encoder
from pairkit.errors import PairkitError, UsageError

TINY = "pairkit-tiny-clip"


@pytest.fixture(scope="module", autouse=True)
def tiny_clip_config():
    import open_clip

    open_clip.add_model_config(Path(__file__).parent / "data" / f"{TINY}.json")


def test_openclip_random_weights_reproducible():
    a = load_encoder(EncoderRequest(f"openclip/{TINY}", pretrained="none", seed=3))
    b = load_encoder(EncoderRequest(f"openclip/{TINY}", pretrained="none", seed=3))
    assert a.dim == 32 and a.preprocess.size == 32
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(a.module(x), b.module(x))
    assert a.describe()["pretrained"] == "none"


def test_openclip_checkpoint_safetensors_and_state_dict(tmp_path):
    from safetensors.torch import save_file

    src = load_encoder(EncoderRequest(f"openclip/{TINY}", pretrained="none", seed=7))
    import open_clip

    torch.manual_seed(7)
    full = open_clip.create_model(TINY, pretrained=None)
    save_file({k: v.contiguous() for k, v in full.state_dict().items()},
              str(tmp_path / "w.safetensors"))
    torch.save({"state_dict": {f"module.{k}": v for k, v in full.state_dict().items()}},
               tmp_path / "w.pt")
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        want = src.module(x)
        for name in ("w.safetensors", "w.pt"):
            enc = load_encoder(EncoderRequest(f"openclip/{TINY}", checkpoint=str(tmp_path / name),
                                              seed=0))
            torch.testing.assert_close(enc.module(x), want)
            assert len(enc.identity["checkpoint_sha256"]) == 64


def test_checkpoint_that_does_not_fit(tmp_path):
    torch.save({"weight": torch.zeros(2, 2)}, tmp_path / "bad.pt")
    with pytest.raises(PairkitError, match="does not fit"):
        load_encoder(EncoderRequest(f"openclip/{TINY}", checkpoint=str(tmp_path / "bad.pt")))


class _Evil:
    def __reduce__(self):
        return (print, ("code ran while loading a checkpoint",))


def test_state_dict_refuses_pickled_code(tmp_path, capsys):
    torch.save({"weights": _Evil()}, tmp_path / "evil.pt")
    with pytest.raises(PairkitError, match="unreadable"):
        load_state_dict(tmp_path / "evil.pt")
    assert "code ran" not in capsys.readouterr().out


def test_missing_weights_offline_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(PairkitError) as info:
        load_encoder(EncoderRequest("openclip/ViT-B-32"))
    message = str(info.value)
    assert "laion2b_s34b_b79k" in message
    for option in ("--checkpoint", "--pretrained none", "--model pixels"):
        assert option in message


def test_unknown_models_and_tags():
    """A name the user mistyped is usage (exit 2), not a failure (exit 1)."""
    with pytest.raises(UsageError, match="unknown model"):
        load_encoder(EncoderRequest("nosuch/thing"))
    with pytest.raises(UsageError, match="open_clip has no model"):
        load_encoder(EncoderRequest("openclip/NoSuchNet", pretrained="none"))
    with pytest.raises(UsageError, match="no pretrained tag"):
        load_encoder(EncoderRequest("openclip/ViT-B-32", pretrained="bogus"))
    with pytest.raises(UsageError, match="timm has no model"):
        load_encoder(EncoderRequest("timm/no_such_net", pretrained="none"))


def test_a_tag_beside_a_checkpoint_or_for_pixels_is_usage(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): timm built ``name.tag`` on the checkpoint path, so
    a bad tag was an internal error (RuntimeError) and a good one was ignored but recorded;
    ``pixels`` took a tag it has no weights for."""
    import timm

    ck = tmp_path / "good.pt"
    torch.save(timm.create_model("test_vit", pretrained=False, num_classes=0).state_dict(), ck)
    for tag in ("bogus", "r160_in1k"):
        with pytest.raises(UsageError, match="--pretrained and --checkpoint exclude each"):
            load_encoder(EncoderRequest("timm/test_vit", pretrained=tag, checkpoint=str(ck)))
    with pytest.raises(UsageError, match="--pretrained and --checkpoint exclude each"):
        load_encoder(EncoderRequest(f"openclip/{TINY}", pretrained="none", checkpoint=str(ck)))
    with pytest.raises(UsageError, match="--pretrained does not apply to --model pixels"):
        load_encoder(EncoderRequest("pixels", pretrained="laion2b_s34b_b79k"))
    enc = load_encoder(EncoderRequest("timm/test_vit", checkpoint=str(ck)))
    assert enc.identity["checkpoint"] == "good.pt"


def test_timm_random_weights():
    enc = load_encoder(EncoderRequest("timm/test_vit", pretrained="none"))
    size = enc.preprocess.size
    with torch.no_grad():
        out = enc.module(torch.rand(2, 3, size, size))
    assert out.shape == (2, enc.dim)


def test_pixels_features_invariances():
    enc = load_encoder(EncoderRequest("pixels"))
    rng = np.random.default_rng(0)
    base = torch.from_numpy(rng.uniform(0.2, 0.8, (1, 3, 64, 64)).astype(np.float32))
    brighter = (base + 0.1).clamp(0, 1)
    other = torch.from_numpy(rng.uniform(0.2, 0.8, (1, 3, 64, 64)).astype(np.float32))
    with torch.no_grad():
        a, b, c = (enc.module(t)[0] for t in (base, brighter, other))
    assert a.shape == (enc.dim,)
    torch.testing.assert_close(a.norm(), torch.tensor(1.0))
    assert float(a @ b) > 0.99  # brightness shift: (almost) the same picture
    assert float(a @ c) < 0.8  # another random picture


def test_pixels_flat_images_are_not_rounding_noise():
    """A flat image's thumbnail and gradients are zero up to float rounding, which
    differs between devices; normalising that noise gave two devices different
    vectors for one file (cosine 0.81 on an H200 against the CPU). Rounding-size
    changes must not move the vector; flat images of any grey level embed alike."""
    enc = load_encoder(EncoderRequest("pixels"))
    rng = np.random.default_rng(1)
    colours = {"green": (10, 200, 30), "grey": (90, 90, 90), "white": (255, 255, 255)}
    got = {}
    for name, rgb in colours.items():
        flat = (torch.tensor(rgb, dtype=torch.float32).view(1, 3, 1, 1) / 255).expand(
            1, 3, 64, 64).contiguous()
        nudged = flat + torch.from_numpy(rng.normal(0, 1e-7, flat.shape).astype(np.float32))
        with torch.no_grad():
            a, b = enc.module(flat)[0], enc.module(nudged)[0]
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
        assert float(a[:256].abs().max()) == 0.0  # no thumbnail
        assert float(a.norm()) == pytest.approx(1.0, abs=1e-5)
        got[name] = a
    assert float(got["grey"] @ got["white"]) == pytest.approx(1.0, abs=1e-5)  # blank = blank
    assert float(got["grey"] @ got["green"]) < 0.95  # a colour is still told apart
    # one grey level in one pixel is content, not noise: the thumbnail is not empty
    step = (torch.full((1, 3, 64, 64), 90 / 255)).clone()
    step[0, :, 10, 10] += 1 / 255
    with torch.no_grad():
        assert float(enc.module(step)[0][:256].abs().max()) > 0


# -- start-up: no random initialisation that is thrown away (issue 24) ------------------


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in module.state_dict().items()}


def _assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype, k
        assert torch.equal(sa[k], sb[k]), k


@pytest.mark.parametrize("name", [TINY, "ViT-S-32"])
def test_random_image_tower_alone_has_create_models_weights(name):
    """`--pretrained none` builds the image tower alone; it holds exactly the weights
    open_clip's whole-model create_model draws from the same seed."""
    import open_clip

    from pairkit.encode.openclip import random_visual_tower

    visual, cfg = random_visual_tower(open_clip, name, seed=5)
    torch.manual_seed(5)
    full = open_clip.create_model(name, pretrained=None)
    _assert_same_state(visual, full.visual)
    assert cfg == full.visual.preprocess_cfg


def test_random_tower_of_a_text_first_model_class_takes_the_whole_model(tmp_path):
    """CoCa builds its text tower first: the image tower alone would draw other numbers,
    so that class goes through the whole create_model (same weights as before)."""
    import json

    import open_clip

    from pairkit.encode.openclip import random_visual_tower

    cfg = json.loads((Path(__file__).parent / "data" / f"{TINY}.json").read_text())
    cfg["text_cfg"].update(embed_cls=True, output_tokens=True)
    cfg["vision_cfg"].update(attentional_pool=True, attn_pooler_heads=2, output_tokens=True)
    cfg["multimodal_cfg"] = {"context_length": 16, "vocab_size": 49408, "width": 32,
                             "heads": 2, "layers": 1, "attn_pooler_heads": 2}
    cfg["custom_text"] = True
    (tmp_path / "pairkit-tiny-coca.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(tmp_path / "pairkit-tiny-coca.json")
    visual, _ = random_visual_tower(open_clip, "pairkit-tiny-coca", seed=2)
    torch.manual_seed(2)
    full = open_clip.create_model("pairkit-tiny-coca", pretrained=None)
    assert type(full).__name__ == "CoCa"
    _assert_same_state(visual, full.visual)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_pretrained_file_loads_into_a_meta_model_with_create_models_result(tmp_path, dtype):
    """Pretrained weights go into a model built on the meta device (no random init first):
    the same tensors (float32, like a copy into a float32 model) and the same vectors as
    open_clip's create_model(pretrained=...), for a float16 checkpoint too."""
    import open_clip
    from safetensors.torch import save_file

    from pairkit.encode.openclip import pretrained_visual_tower

    torch.manual_seed(11)
    src = open_clip.create_model(TINY, pretrained=None)
    path = tmp_path / "clip.safetensors"
    save_file({k: v.to(dtype).contiguous() for k, v in src.state_dict().items()}, str(path))
    visual, cfg = pretrained_visual_tower(open_clip, TINY, str(path))
    want = open_clip.create_model(TINY, pretrained=str(path)).eval()
    assert not any(t.is_meta for t in (*visual.parameters(), *visual.buffers()))
    _assert_same_state(visual, want.visual)
    assert cfg == want.visual.preprocess_cfg
    # the same file through --checkpoint (a file as --pretrained is refused: hunt-u 2)
    enc = load_encoder(EncoderRequest(f"openclip/{TINY}", checkpoint=str(path)))
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(enc.module(x), want.visual(x))
    assert len(enc.identity["checkpoint_sha256"]) == 64


def test_a_file_given_as_pretrained_tag_is_refused(tmp_path: Path, image_folder: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a bug hunt (hunt-u 2): open_clip took ``--pretrained FILE`` as weights,
    recorded as a bare relative path without its sha256, so a changed file mixed two
    encoders in one store. A file goes through --checkpoint (sha256 checked)."""
    import open_clip
    from typer.testing import CliRunner

    from pairkit.cli.main import app

    torch.save(open_clip.create_model(TINY, pretrained=None).state_dict(), tmp_path / "w.pt")
    monkeypatch.chdir(tmp_path)
    for pretrained in ("w.pt", str(tmp_path / "w.pt")):
        with pytest.raises(UsageError, match=f"use --checkpoint {pretrained}$"):
            load_encoder(EncoderRequest(f"openclip/{TINY}", pretrained=pretrained))
    r = CliRunner().invoke(app, ["embed", str(image_folder), "-o", str(tmp_path / "s"),
                                 "--model", f"openclip/{TINY}", "--pretrained", "w.pt"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert "use --checkpoint w.pt" in r.stderr and not (tmp_path / "s").exists()


def test_an_image_tower_checkpoint_embeds_and_text_queries_ask_for_the_text_tower(tmp_path):
    """Found by a bug hunt (hunt-u 7): ``model.visual.state_dict()`` (with or without a
    ``visual.`` prefix) was refused for missing text-tower keys, though embed uses the
    image tower alone. Image-only and whole-model files give the same image tower; text
    queries need the text keys and say so in one line."""
    import open_clip

    from pairkit.encode.openclip import openclip_text_encoder

    torch.manual_seed(5)
    full = open_clip.create_model(TINY, pretrained=None).eval()
    visual = full.visual.state_dict()
    torch.save(full.state_dict(), tmp_path / "whole.pt")
    torch.save(visual, tmp_path / "vis.pt")
    torch.save({f"visual.{k}": v for k, v in visual.items()}, tmp_path / "vis_prefixed.pt")
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        want = full.visual(x)
        for name in ("whole.pt", "vis.pt", "vis_prefixed.pt"):
            enc = load_encoder(EncoderRequest(f"openclip/{TINY}", checkpoint=str(tmp_path / name),
                                              seed=9))
            assert torch.equal(enc.module(x), want), name
            assert not any(k.startswith("text") or k.startswith("transformer")
                           for k in enc.module.state_dict())
    with torch.no_grad():
        got = openclip_text_encoder(TINY, EncoderRequest(
            f"openclip/{TINY}", checkpoint=str(tmp_path / "whole.pt")))(["a cat"])
        np.testing.assert_allclose(got, full.encode_text(
            open_clip.get_tokenizer(TINY)(["a cat"])).numpy(), rtol=1e-5, atol=1e-6)
    for name in ("vis.pt", "vis_prefixed.pt"):
        with pytest.raises(PairkitError) as info:
            openclip_text_encoder(TINY, EncoderRequest(f"openclip/{TINY}",
                                                       checkpoint=str(tmp_path / name)))
        message = str(info.value)
        assert "\n" not in message and "image tower only" in message
        assert "text queries need the whole model's weights" in message


@pytest.fixture
def tiny_clip_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pretrained tags of the tiny model, as open_clip's registry holds them: one with
    open_clip's default preprocessing, one with SigLIP's (mean/std 0.5, squash, bilinear)."""
    import open_clip.pretrained as oc_pretrained

    clip_cfg = {"url": "", "hf_hub": "nobody/tiny-clip/", "mean": (0.48145466, 0.4578275,
                0.40821073), "std": (0.26862954, 0.26130258, 0.27577711),
                "interpolation": "bicubic", "resize_mode": "shortest"}
    sig_cfg = {"url": "", "hf_hub": "nobody/tiny-siglip/", "mean": (0.5, 0.5, 0.5),
               "std": (0.5, 0.5, 0.5), "interpolation": "bilinear", "resize_mode": "squash"}
    monkeypatch.setitem(oc_pretrained._PRETRAINED, TINY, {"clipish": clip_cfg,
                                                          "siglipish": sig_cfg})


def test_a_checkpoint_takes_the_preprocessing_of_the_tag_named_beside_it(
        tmp_path: Path, tiny_clip_tags: None) -> None:
    """Found by a bug hunt (hunt-u 3): ``--checkpoint`` gave open_clip's generic default
    preprocessing whatever the weights, and --pretrained beside it was refused, so SigLIP /
    MobileCLIP weights from a file were fed CLIP's mean/std and a centre crop. Now
    ``--pretrained TAG --checkpoint FILE`` takes TAG's preprocessing (and FILE's weights);
    without a tag, a warning names the tags whose preprocessing differs."""
    import open_clip

    torch.manual_seed(2)
    torch.save(open_clip.create_model(TINY, pretrained=None).state_dict(), tmp_path / "w.pt")
    ck = str(tmp_path / "w.pt")
    plain = load_encoder(EncoderRequest(f"openclip/{TINY}", checkpoint=ck))
    assert plain.preprocess.mean == (0.48145466, 0.4578275, 0.40821073)
    assert plain.preprocess.resize == "shortest"
    assert len(plain.notes) == 1 and "siglipish" in plain.notes[0]
    assert "clipish" not in plain.notes[0].replace("siglipish", "")
    assert "--pretrained TAG" in plain.notes[0]
    sig = load_encoder(EncoderRequest(f"openclip/{TINY}", pretrained="siglipish", checkpoint=ck))
    assert sig.preprocess.mean == (0.5, 0.5, 0.5) and sig.preprocess.std == (0.5, 0.5, 0.5)
    assert (sig.preprocess.interpolation, sig.preprocess.resize) == ("bilinear", "squash")
    assert sig.preprocess.size == plain.preprocess.size and sig.notes == []
    assert sig.identity["preprocess_tag"] == "siglipish"
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():  # the file's weights either way
        assert torch.equal(sig.module(x), plain.module(x))
    with pytest.raises(UsageError, match="no pretrained tag 'bogus'"):
        load_encoder(EncoderRequest(f"openclip/{TINY}", pretrained="bogus", checkpoint=ck))
    with pytest.raises(UsageError, match="--pretrained and --checkpoint exclude each"):
        load_encoder(EncoderRequest(f"openclip/{TINY}", pretrained="none", checkpoint=ck))


def test_embed_records_the_tag_of_the_checkpoints_preprocessing(
        tmp_path: Path, image_folder: Path, tiny_clip_tags: None) -> None:
    """The tag is part of the store's identity (another preprocessing is another store)
    and image queries rebuild the encoder with it."""
    import open_clip
    from typer.testing import CliRunner

    from pairkit.cli.main import app
    from pairkit.core.store import Store
    from pairkit.encode.query import encode_images, encoder_request

    torch.save(open_clip.create_model(TINY, pretrained=None).state_dict(), tmp_path / "w.pt")
    args = ["embed", str(image_folder), "-o", str(tmp_path / "s"), "--model",
            f"openclip/{TINY}", "--checkpoint", str(tmp_path / "w.pt"), "--dtype", "float32"]
    r = CliRunner().invoke(app, [*args, "--pretrained", "siglipish"])
    assert r.exit_code == 0, r.output
    store = Store.open(tmp_path / "s")
    assert store.manifest["embedding"]["pretrained"] == "siglipish"
    assert store.encoder["preprocess"]["resize"] == "squash"
    r = CliRunner().invoke(app, args)  # no tag: the default preprocessing, another store
    assert r.exit_code == 1 and "pretrained differ" in r.output
    request = encoder_request(store, "cpu", str(tmp_path / "w.pt"))
    assert request.pretrained == "siglipish"
    paths = [str(image_folder / p) for p in store.items["path"][:2]]
    np.testing.assert_allclose(encode_images(request, paths), store.vectors()[:2], atol=1e-5)
