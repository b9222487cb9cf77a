"""Built-in encoders: open_clip, timm and the weight-free ``pixels`` encoder.

This module is imported only when an encoder is loaded (torch is needed then anyway).

Weights: ``--pretrained TAG`` loads through the library's own loading (the
Hugging Face hub cache first, without touching the network; then a download
unless HF_HUB_OFFLINE is set). ``--pretrained none`` builds random weights from
``--seed``. ``--checkpoint PATH`` loads a local safetensors file or a state
dict (``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from pairkit.encode.registry import (
    DEFAULT_OPENCLIP_TAG,
    Encoder,
    EncoderRequest,
    Preprocess,
    register_encoder,
)
from pairkit.encode.weights import WAYS_OUT as WEIGHT_OPTIONS
from pairkit.encode.weights import env_offline as _env_offline
from pairkit.encode.weights import is_random as _is_random
from pairkit.errors import PairkitError

# loggers of the libraries that load weights: quiet while pairkit says what happened
THIRD_PARTY_LOGGERS = ("", "huggingface_hub", "open_clip", "timm", "urllib3", "httpx")


@contextlib.contextmanager
def _hub_offline(offline: bool) -> Iterator[None]:
    """Make huggingface_hub use its cache only (no network) inside the block."""
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - hub is a dependency of open_clip and timm
        yield
        return
    old = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = offline or old
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = old


@contextlib.contextmanager
def _quiet_third_party() -> Iterator[None]:
    """Silence the warnings and log lines (retries, "initialized randomly", failed
    downloads) of the libraries that load weights; pairkit reports the outcome itself."""
    import logging
    import warnings

    loggers = [logging.getLogger(name) for name in THIRD_PARTY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _load_with_cache_first(build: Any, what: str, offline: bool = False) -> Any:
    """Call ``build()`` with the hub cache only; if the weights are not cached and we
    may go online (``offline`` False and no HF_HUB_OFFLINE), call it again allowing a
    download. One-line error otherwise."""
    import sys

    try:
        with _hub_offline(True), _quiet_third_party():
            return build()
    except PairkitError:
        raise
    except Exception as first:
        if offline or _env_offline():
            raise PairkitError(
                f"the weights of {what} are not in the Hugging Face cache and the hub is out "
                f"of reach: {WEIGHT_OPTIONS}"
            ) from first
    print(f"downloading the weights of {what} (HF_HUB_OFFLINE=1 fails fast instead)",
          file=sys.stderr)
    try:
        with _quiet_third_party():
            return build()
    except Exception as exc:
        raise PairkitError(
            f"the weights of {what} could not be downloaded ({_first_line(exc)}): "
            f"{WEIGHT_OPTIONS}"
        ) from exc


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message, whole (never cut mid-word)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _apply_checkpoint(module: Any, path: str, what: str, identity: dict[str, Any]) -> None:
    """Load ``path`` into ``module`` (key layouts mapped: pairkit.encode.checkpoints) and
    record its sha256, file name and the layout recognised in ``identity``."""
    from pairkit.core.store import sha256_file
    from pairkit.encode.checkpoints import fit_state_dict, load_state_dict

    report = fit_state_dict(load_state_dict(path), module, what, path)
    identity["checkpoint_sha256"] = sha256_file(path)
    identity["checkpoint"] = os.path.basename(path)
    identity["checkpoint_fit"] = report.describe()


# -- open_clip ---------------------------------------------------------------------


# optional packages open_clip imports at import time, and the config key that needs each
_OPEN_CLIP_OPTIONAL = {"transformers": ("text_cfg", "hf_model_name"),
                       "timm": ("vision_cfg", "timm_model_name")}


def import_open_clip(name: str) -> Any:
    """``import open_clip`` without its optional imports of transformers and timm (seconds
    of start-up, 11 s measured with transformers on one GPU host) unless the model
    ``name`` needs them: a Hugging Face text tower or a timm vision tower, or a config
    this function can't read (then everything is imported as usual)."""
    import importlib
    import sys

    needed = _open_clip_needs(name)
    if "open_clip" in sys.modules:
        open_clip = sys.modules["open_clip"]
        for module, package in (("hf_model", "transformers"), ("timm_model", "timm")):
            sub = sys.modules.get(f"open_clip.{module}")
            if package in needed and sub is not None and getattr(sub, package, 1) is None:
                importlib.reload(sub)  # imported before without it
        return open_clip
    blocked = [m for m in _OPEN_CLIP_OPTIONAL if m not in needed and m not in sys.modules]
    for m in blocked:
        sys.modules[m] = None  # type: ignore[assignment]  # makes `import m` fail fast
    try:
        import open_clip
    finally:
        for m in blocked:
            if sys.modules.get(m, 0) is None:
                del sys.modules[m]
    return open_clip


def _open_clip_needs(name: str) -> set[str]:
    """The optional packages open_clip model ``name`` needs, read from its config file in
    the installed open_clip (without importing it); all of them when unreadable."""
    import importlib.util
    import json

    everything = set(_OPEN_CLIP_OPTIONAL)
    try:
        spec = importlib.util.find_spec("open_clip")
        origin = spec.origin if spec is not None else None
        if origin is None:
            return everything
        cfg = json.loads((Path(origin).parent / "model_configs" / f"{name}.json").read_text())
    except (OSError, ValueError, ImportError):
        return everything
    return {m for m, (part, key) in _OPEN_CLIP_OPTIONAL.items()
            if key in (cfg.get(part) or {})}


def _openclip_model(name: str, req: EncoderRequest) -> tuple[Any, dict[str, Any]]:
    """The whole open_clip model (image and text towers) a request names, in eval mode,
    and its manifest identity."""
    open_clip = import_open_clip(name)

    if not name:
        raise PairkitError("name the open_clip model: --model openclip/ViT-B-32")
    if name not in open_clip.list_models():
        raise PairkitError(
            f"open_clip has no model {name!r} (see open_clip.list_models(); e.g. ViT-B-32)"
        )
    what = f"openclip/{name}"
    identity: dict[str, Any] = {"library": "open_clip", "library_version": open_clip.__version__}
    tag = req.pretrained
    if req.checkpoint or _is_random(tag):
        torch.manual_seed(req.seed)
        with _quiet_third_party():  # open_clip logs "initialized randomly": we asked for it
            model = open_clip.create_model(name, pretrained=None)
        if req.checkpoint:
            _apply_checkpoint(model, req.checkpoint, what, identity)
        else:
            identity["pretrained"] = "none"
            identity["seed"] = req.seed
    else:
        known = open_clip.list_pretrained_tags_by_model(name)
        if tag is None:
            tag = DEFAULT_OPENCLIP_TAG.get(name) or (known[0] if known else None)
            if tag is None:
                raise PairkitError(f"open_clip knows no pretrained weights for {name}: "
                                   f"{WEIGHT_OPTIONS}")
        if tag not in known and not Path(tag).is_file():
            raise PairkitError(
                f"open_clip has no pretrained tag {tag!r} for {name} "
                f"(known: {', '.join(known) or 'none'}); {WEIGHT_OPTIONS}"
            )
        model = _load_with_cache_first(
            lambda: open_clip.create_model(name, pretrained=tag, require_pretrained=True),
            f"{what} ({tag})", offline=req.offline,
        )
        identity["pretrained"] = tag
    model.eval()
    return model, identity


def _openclip(name: str, req: EncoderRequest) -> Encoder:
    model, identity = _openclip_model(name, req)
    what = f"openclip/{name}"
    cfg = dict(getattr(model.visual, "preprocess_cfg", {}) or {})
    size = cfg.get("size", 224)
    size = int(size[0] if isinstance(size, (tuple, list)) else size)
    preprocess = Preprocess(
        size=size,
        mean=tuple(cfg.get("mean", (0.48145466, 0.4578275, 0.40821073))),
        std=tuple(cfg.get("std", (0.26862954, 0.26130258, 0.27577711))),
        interpolation=str(cfg.get("interpolation", "bicubic")),
        resize="squash" if cfg.get("resize_mode") == "squash" else "shortest",
    )
    visual = VisualOnly(model)
    dim = getattr(model.visual, "output_dim", None)
    dim = int(dim) if isinstance(dim, int) else _probe_dim(visual, size)
    return Encoder(name=what, dim=dim, preprocess=preprocess, module=visual, identity=identity)


def _probe_dim(module: Any, size: int) -> int:

    with torch.no_grad():
        out = module(torch.zeros(1, 3, size, size))
    return int(out.shape[-1])


class VisualOnly(torch.nn.Module):
    """Keeps only the image tower of a CLIP model; forward = encode_image."""

    def __init__(self, clip: Any) -> None:
        super().__init__()
        self.visual = clip.visual

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.visual(pixels)


# -- timm --------------------------------------------------------------------------


def _timm(name: str, req: EncoderRequest) -> Encoder:
    import timm

    if not name:
        raise PairkitError("name the timm model: --model timm/resnet50")
    base = name.split(".")[0]
    if not timm.list_models(base):
        raise PairkitError(f"timm has no model {base!r} (see timm.list_models())")
    what = f"timm/{name}"
    identity: dict[str, Any] = {"library": "timm", "library_version": timm.__version__}
    tag = req.pretrained
    full = name if tag is None or _is_random(tag) else f"{base}.{tag}"
    if req.checkpoint or _is_random(tag):
        torch.manual_seed(req.seed)
        model = timm.create_model(full, pretrained=False, num_classes=0)
        if req.checkpoint:
            _apply_checkpoint(model, req.checkpoint, what, identity)
        else:
            identity["pretrained"] = "none"
            identity["seed"] = req.seed
    else:
        model = _load_with_cache_first(
            lambda: timm.create_model(full, pretrained=True, num_classes=0), what,
            offline=req.offline,
        )
        identity["pretrained"] = getattr(model, "pretrained_cfg", {}).get("tag") or tag or "default"
    model.eval()
    cfg = timm.data.resolve_data_config({}, model=model)
    size = int(cfg["input_size"][-1])
    preprocess = Preprocess(
        size=size,
        mean=tuple(float(v) for v in cfg["mean"]),
        std=tuple(float(v) for v in cfg["std"]),
        interpolation=str(cfg.get("interpolation", "bicubic")),
    )
    dim = _probe_dim(model, size)
    return Encoder(name=f"timm/{full}", dim=dim, preprocess=preprocess, module=model,
                   identity=identity)


# -- pixels ------------------------------------------------------------------------


def _pixels(name: str, req: EncoderRequest) -> Encoder:
    from pairkit.encode.pixels import PIXELS_PREPROCESS, PixelFeatures

    if name:
        raise PairkitError("the pixels encoder takes no sub-name: --model pixels")
    if req.checkpoint:
        raise PairkitError("--checkpoint does not apply to --model pixels (it has no weights)")
    module = PixelFeatures()
    return Encoder(
        name="pixels",
        dim=module.dim,
        preprocess=PIXELS_PREPROCESS,
        module=module,
        identity={"version": module.version},
    )


def register_builtins() -> None:
    """Register openclip/, timm/ and pixels (idempotent)."""
    register_encoder("openclip", _openclip)
    register_encoder("timm", _timm)
    register_encoder("pixels", _pixels)


register_builtins()


def openclip_text_encoder(name: str, req: EncoderRequest) -> Any:
    """``encode(texts) -> (n, dim) float32`` with the text tower of the open_clip model
    ``name`` built as ``req`` asks (the same weights as its image tower in
    :func:`_openclip`): the text side of ``pairkit search --text``."""
    import numpy as np

    model, _ = _openclip_model(name, req)
    tokenizer = import_open_clip(name).get_tokenizer(name)
    model = model.to(req.device)

    def encode(texts: list[str]) -> np.ndarray:
        with torch.inference_mode():
            out = model.encode_text(tokenizer(list(texts)).to(req.device))
        return out.float().cpu().numpy()

    return encode
