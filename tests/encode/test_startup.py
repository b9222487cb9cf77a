"""Start-up: loading an open_clip image tower imports neither transformers nor timm unless
the model needs them (they cost seconds of every `embed`; 11 s measured on one GPU host)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from pairkit.encode.registry import EncoderRequest, load_encoder
enc = load_encoder(EncoderRequest("openclip/{model}", pretrained="none"))
print(enc.dim, "transformers" in sys.modules, "timm" in sys.modules)
"""


def _run(model: str, fake_root: Path) -> list[str]:
    path = os.pathsep.join([str(ROOT), str(fake_root), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path.rstrip(os.pathsep), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", PROBE.format(model=model)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


@pytest.fixture
def fake_transformers(tmp_path: Path) -> Path:
    """A stand-in `transformers` package on the path (the real one where installed is
    found first only if it comes earlier; this one raises nothing and only marks that it
    was imported), so the check means something without the real package."""
    pkg = tmp_path / "fake" / "transformers"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("IMPORTED = True\n")
    return tmp_path / "fake"


def test_vision_tower_without_transformers_or_timm(fake_transformers: Path) -> None:
    dim, transformers, timm = _run("ViT-S-32", fake_transformers)
    assert dim == "384"
    assert transformers == "False" and timm == "False"


def test_hf_text_tower_config_asks_for_transformers() -> None:
    from pairkit.encode.openclip import open_clip_needs

    assert open_clip_needs("ViT-B-32") == set()
    assert "transformers" in open_clip_needs("xlm-roberta-base-ViT-B-32")
    assert open_clip_needs("no-such-config") == {"transformers", "timm"}


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "PAIRKIT_OFFLINE"])
def test_an_offline_environment_never_tries_the_download(variable, monkeypatch) -> None:
    """Weights not in the cache: with HF_HUB_OFFLINE (or PAIRKIT_OFFLINE) set the build is
    tried once, from the cache, and the error is one line; without it, a second try may
    download."""
    from pairkit.encode.model_loading import load_with_cache_first
    from pairkit.encode.weights import OFFLINE_VARIABLES
    from pairkit.errors import PairkitError

    for v in OFFLINE_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    calls = []

    def build():  # noqa: ANN202
        calls.append(1)
        if len(calls) == 1:
            raise OSError("not in cache")
        return "model"

    monkeypatch.setenv(variable, "1")
    with pytest.raises(PairkitError, match="not in the Hugging Face cache and the hub is out"):
        load_with_cache_first(build, "timm/x")
    assert len(calls) == 1
    monkeypatch.delenv(variable)
    calls.clear()
    assert load_with_cache_first(build, "timm/x") == "model" and len(calls) == 2
