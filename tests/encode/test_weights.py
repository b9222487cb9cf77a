"""Fast, clean failures before heavy imports: bad paths, missing weights while offline."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.encode import weights
from pairkit.encode.registry import DEFAULT_OPENCLIP_TAG
from pairkit.errors import PairkitError
from tests.proc import with_repo_path

runner = CliRunner()
DEFAULT_REPO = "models--laion--CLIP-ViT-B-32-laion2B-s34B-b79K"
WAYS_OUT = ("--checkpoint FILE", "--pretrained none", "--model pixels")


def fake_snapshot(cache: Path, folder: str) -> None:
    snap = cache / folder / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "open_clip_model.safetensors").write_bytes(b"weights")


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return cache


def check(model: str = "openclip/ViT-B-32", pretrained: str | None = None,
          checkpoint: str | None = None) -> bool:
    return weights.check_pretrained(model, pretrained, checkpoint, DEFAULT_OPENCLIP_TAG)


def test_default_model_offline_fails_with_the_ways_out(empty_cache: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert weights.hub_cache_dir() == empty_cache
    with pytest.raises(PairkitError) as err:
        check()
    text = str(err.value)
    assert "openclip/ViT-B-32 (laion2b_s34b_b79k)" in text and "HF_HUB_OFFLINE is set" in text
    assert all(way in text for way in WAYS_OUT) and "\n" not in text
    # cached: fine, and the loader may use the cache
    fake_snapshot(empty_cache, DEFAULT_REPO)
    assert check() is False


def test_unreachable_hub_detected_without_retries(empty_cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for name in weights.OFFLINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(weights, "hub_reachable", lambda timeout=1.0: False)
    with pytest.raises(PairkitError, match="the Hugging Face hub can't be reached"):
        check()
    monkeypatch.setattr(weights, "hub_reachable", lambda timeout=1.0: True)
    assert check() is False  # online: the library may download


def test_hub_reachable_is_one_bounded_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    # a closed local port answers at once: refused, not a retry loop
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert weights.hub_reachable(timeout=1.0) is False


def test_models_without_hub_weights_pass(empty_cache: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert check("pixels") is False
    assert check(pretrained="none") is False
    assert check(checkpoint="w.safetensors") is False


def test_timm_offline(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PairkitError, match="the weights of timm/resnet18 are not in"):
        check("timm/resnet18")
    fake_snapshot(empty_cache, "models--timm--resnet18.a1_in1k")
    assert check("timm/resnet18") is True  # maybe cached: the library looks, cache only


def test_timm_name_and_tag_are_checked_before_the_weights(
        empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a bug hunt (hunt-u 8): offline, a misspelt timm model or a bad tag was
    reported as weights missing from the cache, and the advice (--pretrained none) only
    then revealed the typo. The name and the tag are usage errors, as open_clip's are."""
    from pairkit.encode.registry import EncoderRequest, load_encoder
    from pairkit.errors import UsageError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match=r"^timm has no model 'notamodel' \(see timm"):
        check("timm/notamodel")
    for model, tag in (("timm/resnet18", "bogus"), ("timm/resnet18.bogus", None)):
        with pytest.raises(UsageError) as err:
            check(model, tag)
        text = str(err.value)
        assert text.startswith("timm has no pretrained tag 'bogus' for resnet18 (known: "
                               "a1_in1k, a2_in1k, ")
        assert all(way in text for way in WAYS_OUT) and "\n" not in text
    # a cached model of other weights: the loader checks the tag before loading
    fake_snapshot(empty_cache, "models--timm--resnet18.a1_in1k")
    assert check("timm/resnet18", "bogus") is True
    with pytest.raises(UsageError, match="timm has no pretrained tag 'bogus' for resnet18"):
        load_encoder(EncoderRequest("timm/resnet18", pretrained="bogus", offline=True))
    with pytest.raises(UsageError, match="timm has no pretrained tag 'bogus' for test_vit "
                                         r"\(known: r160_in1k\)"):
        load_encoder(EncoderRequest("timm/test_vit.bogus", offline=True))
    # the name and tag are read from timm's sources first, without importing timm
    assert weights.timm_source_knows("resnet18", None)
    assert weights.timm_source_knows("resnet18", "a1_in1k")
    assert weights.timm_source_knows("resnet18.a1_in1k", None)
    assert not weights.timm_source_knows("notamodel", None)
    assert not weights.timm_source_knows("resnet18", "bogus")


def test_missing_timm_weights_are_told_before_torch_loads(tmp_path: Path,
                                                          image_folder: Path) -> None:
    """The name check of hunt-u 8 costs nothing when the name is right: the weights are
    still reported missing before torch (or timm) is imported."""
    env = {"HF_HOME": str(tmp_path / "hf"), "TORCH_HOME": str(tmp_path / "torch"),
           "HF_HUB_OFFLINE": "1"}
    code, err, torch_loaded = run_cli(["embed", str(image_folder), "-o", str(tmp_path / "s"),
                                       "--model", "timm/resnet18"], env)
    assert (code, torch_loaded) == (1, False)
    assert err.startswith("error: the weights of timm/resnet18 are not in the Hugging Face")


def test_loader_stays_offline_and_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    from pairkit.encode.model_loading import load_with_cache_first

    calls = []
    sink = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(sink)

    def build():  # noqa: ANN202
        calls.append(1)
        logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 8s [Retry 4/5]")
        logging.getLogger().error("Failed to download weights")
        raise OSError("not cached")

    try:
        with pytest.raises(PairkitError, match="not in the Hugging Face cache") as err:
            load_with_cache_first(build, "openclip/X (tag)", offline=True)
    finally:
        logging.getLogger().removeHandler(sink)
    assert calls == [1]  # no download attempt
    assert all(way in str(err.value) for way in WAYS_OUT)
    assert capsys.readouterr().err == ""  # the libraries' log lines were silenced


def run_cli(args: list[str], env: dict[str, str]) -> tuple[int, str, bool]:
    """Run ``pairkit ARGS`` in a fresh interpreter; (exit code, stderr, torch imported)."""
    code = (
        "import sys\n"
        "from pairkit.cli.main import app\n"
        "try:\n"
        f"    app(args={args!r}, prog_name='pairkit')\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "print(json.dumps([code, 'torch' in sys.modules]))\n"
    )
    full_env = {**os.environ, **env, "PYTHONPATH": with_repo_path()}
    proc = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True,
                          text=True, env=full_env, timeout=120)
    exit_code, torch_loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    return exit_code, proc.stderr, torch_loaded


def test_embed_says_no_before_torch_loads(tmp_path: Path, image_folder: Path) -> None:
    """A wrong path, a bad option value or missing weights are reported before torch (or
    open_clip) is imported: one line, no store folder left behind."""
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    store = tmp_path / "store"
    code, err, torch_loaded = run_cli(["embed", "/no/such/dir", "-o", str(store)], env)
    assert (code, torch_loaded) == (1, False)
    assert err == "error: image folder /no/such/dir not found\n"
    code, err, torch_loaded = run_cli(["embed", str(image_folder), "-o", str(store)], env)
    assert (code, torch_loaded) == (1, False)
    assert err.count("\n") == 1 and err.startswith("error: the weights of openclip/ViT-B-32")
    assert all(way in err for way in WAYS_OUT)
    assert not store.exists()
    code, err, torch_loaded = run_cli(["embed", str(image_folder), "-o", str(store), "--model",
                                       "pixels", "--views", "0"], env)
    assert (code, torch_loaded) == (2, False) and "--views must be >= 1, got 0" in err
    # found by a bug hunt (2026-12-06): no upper bound, so --views 32769 embedded every
    # image before the store's view column refused it (exit 1, the old store gone)
    code, err, torch_loaded = run_cli(["embed", str(image_folder), "-o", str(store), "--model",
                                       "pixels", "--views", "32769"], env)
    assert (code, torch_loaded) == (2, False)
    assert "--views must be <= 32768, got 32769" in err and not store.exists()
    code, err, torch_loaded = run_cli(["embed", str(image_folder), "-o", str(store), "--model",
                                       "pixels", "--checkpoint", str(tmp_path / "w.pt")], env)
    assert (code, torch_loaded) == (2, False) and "does not apply to --model pixels" in err
    code, err, torch_loaded = run_cli(["embed", str(image_folder), "-o", str(store), "--model",
                                       "timm/efficientnet_b0", "--checkpoint",
                                       str(tmp_path / "w.pt")], env)
    assert (code, torch_loaded) == (1, False) and "not found" in err
    code, err, torch_loaded = run_cli(["embed", str(image_folder), "-o", str(store), "--model",
                                       "timm/efficientnet_b0", "--checkpoint", str(tmp_path)],
                                      env)
    assert (code, torch_loaded) == (1, False) and "is a folder, expected a weights file" in err


def test_failed_encoder_leaves_no_store_folder(tmp_path: Path, image_folder: Path) -> None:
    from pairkit.encode.registry import register_encoder, unregister_encoder

    def broken(name, request):  # noqa: ANN001, ANN202
        raise PairkitError("weights unavailable")

    register_encoder("broken", broken)
    try:
        r = runner.invoke(app, ["embed", str(image_folder), "-o", str(tmp_path / "s"),
                                "--model", "broken"])
    finally:
        unregister_encoder("broken")
    assert r.exit_code == 1 and "weights unavailable" in r.stderr
    assert not (tmp_path / "s").exists()


def test_hub_cache_dir_resolves_as_huggingface_hub_does(tmp_path: Path) -> None:
    """HF_HUB_CACHE (or its old name) first, then HF_HOME/hub, then
    XDG_CACHE_HOME/huggingface/hub: a cache set by HF_HUB_CACHE is where the weights are
    looked for (else a cached model would be refused offline)."""
    env = {"HF_HUB_CACHE": "/c/hub", "HUGGINGFACE_HUB_CACHE": "/old", "HF_HOME": "/h",
           "XDG_CACHE_HOME": "/x"}
    assert weights.hub_cache_dir(env) == Path("/c/hub")
    assert weights.hub_cache_dir({**env, "HF_HUB_CACHE": ""}) == Path("/old")
    assert weights.hub_cache_dir({"HF_HOME": "/h", "XDG_CACHE_HOME": "/x"}) == Path("/h/hub")
    assert weights.hub_cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/huggingface/hub")


def test_a_snapshot_folder_without_a_file_is_not_cached(tmp_path: Path) -> None:
    """An interrupted download leaves the snapshot's folders and no file: not cached."""
    snap = tmp_path / "models--org--name" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    assert not weights.repo_cached("org/name", tmp_path)
    (snap / "open_clip_model.safetensors").write_bytes(b"w")
    assert weights.repo_cached("org/name", tmp_path)


def test_random_weight_tags_and_a_tag_beside_a_checkpoint(tmp_path: Path) -> None:
    """``none`` and ``random`` (any case) mean random weights; beside --checkpoint an
    open_clip tag names the file's preprocessing and is allowed, ``none`` is not, and for
    timm no tag is."""
    from pairkit.errors import UsageError

    assert all(weights.is_random(t) for t in ("none", "random", "None", "RANDOM"))
    assert not any(weights.is_random(t) for t in (None, "openai", "laion2b_s34b_b79k"))
    weights.check_weight_options("openai", "w.pt", tag_for_preprocessing=True)
    for tag in ("none", "random"):
        with pytest.raises(UsageError, match="exclude each other"):
            weights.check_weight_options(tag, "w.pt", tag_for_preprocessing=True)
    with pytest.raises(UsageError, match="exclude each other"):
        weights.check_weight_options("openai", "w.pt")
    (tmp_path / "w.pt").write_bytes(b"x")
    with pytest.raises(UsageError, match="is a file: use --checkpoint"):
        weights.check_weight_options(str(tmp_path / "w.pt"), None)


def test_timm_weights_of_a_tagged_name_are_found_under_its_base(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``resnet50.a1_in1k``: a hub folder of resnet50's (timm/resnet50.*) or a file in
    torch's hub checkpoints named after resnet50 may hold its weights; a cache without
    either can't."""
    hub, torch_home = tmp_path / "hub", tmp_path / "torch"
    hub.mkdir()
    monkeypatch.setenv("TORCH_HOME", str(torch_home))
    assert weights.timm_weights_absent("resnet50.a1_in1k", hub)
    ckpt = torch_home / "hub" / "checkpoints"
    ckpt.mkdir(parents=True)
    (ckpt / "resnet50_a1_0-14fe96d1.pth").write_bytes(b"w")
    assert not weights.timm_weights_absent("resnet50.a1_in1k", hub)
    (ckpt / "resnet50_a1_0-14fe96d1.pth").unlink()
    snap = hub / "models--timm--resnet50.tv_in1k" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    assert weights.timm_weights_absent("resnet50.a1_in1k", hub)  # no file yet
    (snap / "model.safetensors").write_bytes(b"w")
    assert not weights.timm_weights_absent("resnet50.a1_in1k", hub)
    assert weights.timm_weights_absent("vit_small_patch16_224.augreg_in21k", hub)
