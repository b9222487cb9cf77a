"""Built-in encoders: registered here, open_clip's in :mod:`pairkit.encode.openclip`, timm and
the weight-free ``pixels`` encoder.

This module is imported only when an encoder is loaded (torch is needed then anyway).

Weights: ``--pretrained TAG`` loads through the library's own loading (the
Hugging Face hub cache first, without touching the network; then a download
unless HF_HUB_OFFLINE is set). ``--pretrained none`` builds random weights from
``--seed``. ``--checkpoint PATH`` loads a local safetensors file or a state
dict (``torch.load(weights_only=True)``).
"""

from __future__ import annotations

from typing import Any

import torch

from pairkit.encode.model_loading import (
    apply_checkpoint,
    load_with_cache_first,
    probe_dim,
)
from pairkit.encode.openclip import openclip_encoder
from pairkit.encode.registry import Encoder, EncoderRequest, Preprocess, register_encoder
from pairkit.encode.weights import check_timm_name, check_weight_options, is_random
from pairkit.errors import PairkitError, UsageError

# -- timm --------------------------------------------------------------------------

TIMM_CROP_MODES = {"center": "shortest", "squash": "squash", "border": "border"}
TIMM_DEFAULT_CROP_PCT = 0.875  # timm.data.transforms_imagenet_eval's, when a config has none


def _timm(name: str, req: EncoderRequest) -> Encoder:
    import timm

    check_weight_options(req.pretrained, req.checkpoint)
    check_timm_name(name, req.pretrained)
    base = name.split(".")[0]
    what = f"timm/{name}"
    identity: dict[str, Any] = {"library": "timm", "library_version": timm.__version__}
    tag = req.pretrained
    full = name if tag is None or is_random(tag) else f"{base}.{tag}"
    if req.checkpoint or is_random(tag):
        torch.manual_seed(req.seed)
        model = timm.create_model(full, pretrained=False, num_classes=0)
        if req.checkpoint:
            apply_checkpoint(model, req.checkpoint, what, identity)
        else:
            identity["pretrained"] = "none"
            identity["seed"] = req.seed
    else:
        model = load_with_cache_first(
            lambda: timm.create_model(full, pretrained=True, num_classes=0), what,
            offline=req.offline,
        )
        identity["pretrained"] = getattr(model, "pretrained_cfg", {}).get("tag") or tag or "default"
    model.eval()
    cfg = timm.data.resolve_data_config({}, model=model)
    size = int(cfg["input_size"][-1])
    # timm's eval transform: resize to size / crop_pct, then centre crop (crop_mode center),
    # squash both sides, or fit the long side and pad (border); timm's defaults when unset
    crop_mode = str(cfg.get("crop_mode") or "center")
    preprocess = Preprocess(
        size=size,
        mean=tuple(float(v) for v in cfg["mean"]),
        std=tuple(float(v) for v in cfg["std"]),
        interpolation=str(cfg.get("interpolation", "bicubic")),
        resize=TIMM_CROP_MODES.get(crop_mode, "shortest"),
        crop_pct=float(cfg.get("crop_pct") or TIMM_DEFAULT_CROP_PCT),
    )
    dim = probe_dim(model, size)
    return Encoder(name=f"timm/{full}", dim=dim, preprocess=preprocess, module=model,
                   identity=identity)


# -- pixels ------------------------------------------------------------------------


def _pixels(name: str, req: EncoderRequest) -> Encoder:
    from pairkit.encode.pixels import PIXELS_PREPROCESS, PixelFeatures

    if name:
        raise PairkitError("the pixels encoder takes no sub-name: --model pixels")
    if req.checkpoint:
        raise PairkitError("--checkpoint does not apply to --model pixels (it has no weights)")
    if req.pretrained is not None:
        raise UsageError("--pretrained does not apply to --model pixels (it has no weights)")
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
    register_encoder("openclip", openclip_encoder)
    register_encoder("timm", _timm)
    register_encoder("pixels", _pixels)


register_builtins()
