"""The ``openclip/`` encoders: open_clip imported without the optional packages a model
doesn't need, the image tower built alone (random weights from a seed, or pretrained ones
assigned on the meta device), and the text tower for ``pairkit search --text``.

Imported only when an open_clip encoder is loaded (torch is needed then anyway)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pairkit.encode.model_loading import (
    apply_checkpoint,
    load_with_cache_first,
    probe_dim,
    quiet_third_party,
)
from pairkit.encode.registry import DEFAULT_OPENCLIP_TAG, Encoder, EncoderRequest, Preprocess
from pairkit.encode.weights import WAYS_OUT as WEIGHT_OPTIONS
from pairkit.encode.weights import check_weight_options, is_random
from pairkit.errors import PairkitError, UsageError

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

    needed = open_clip_needs(name)
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


def open_clip_needs(name: str) -> set[str]:
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


def _openclip_weights(name: str, req: EncoderRequest) -> tuple[Any, str, dict[str, Any]]:
    """Check a request for open_clip model ``name``: (the open_clip module, the pretrained
    tag to load or "none" for random weights or "" for ``--checkpoint``, the manifest
    identity so far). One-line PairkitError for an unknown model or tag."""
    open_clip = import_open_clip(name)

    if not name:
        raise UsageError("name the open_clip model: --model openclip/ViT-B-32")
    if open_clip.get_model_config(name) is None:  # (a dict lookup, not a scan of the list)
        raise UsageError(
            f"open_clip has no model {name!r} (see open_clip.list_models(); e.g. ViT-B-32)"
        )
    identity: dict[str, Any] = {"library": "open_clip", "library_version": open_clip.__version__}
    tag = req.pretrained
    check_weight_options(tag, req.checkpoint, tag_for_preprocessing=True)
    known = open_clip.list_pretrained_tags_by_model(name)
    if req.checkpoint:
        if tag is not None and tag not in known:
            raise UsageError(
                f"open_clip has no pretrained tag {tag!r} for {name} (known: "
                f"{', '.join(known) or 'none'}): beside --checkpoint, --pretrained names the "
                "tag whose preprocessing the file's weights take")
        return open_clip, "", identity
    if is_random(tag):
        identity["pretrained"] = "none"
        identity["seed"] = req.seed
        return open_clip, "none", identity
    if tag is None:
        tag = DEFAULT_OPENCLIP_TAG.get(name) or (known[0] if known else None)
        if tag is None:
            raise PairkitError(f"open_clip knows no pretrained weights for {name}: "
                               f"{WEIGHT_OPTIONS}")
    if tag not in known:
        raise UsageError(
            f"open_clip has no pretrained tag {tag!r} for {name} "
            f"(known: {', '.join(known) or 'none'}); {WEIGHT_OPTIONS}"
        )
    identity["pretrained"] = tag
    return open_clip, tag, identity


def _is_image_tower(key: str) -> bool:
    return key.startswith("visual.")


def _openclip_model(name: str, req: EncoderRequest, text: bool = True
                    ) -> tuple[Any, dict[str, Any]]:
    """The whole open_clip model (image and text towers) a request names, in eval mode,
    and its manifest identity (the text side of ``pairkit search --text``). ``text``
    False: only the image tower will be used, so a ``--checkpoint`` of the image tower
    alone (``model.visual.state_dict()``, with or without the ``visual.`` prefix) fits;
    True: the checkpoint must hold the text tower too (one-line PairkitError)."""
    open_clip, tag, identity = _openclip_weights(name, req)
    what = f"openclip/{name}"
    if tag in ("", "none"):
        torch.manual_seed(req.seed)
        with quiet_third_party():  # open_clip logs "initialized randomly": we asked for it
            model = open_clip.create_model(name, pretrained=None)
        if req.checkpoint:
            lacking = apply_checkpoint(model, req.checkpoint, what, identity,
                                       optional=lambda k: not _is_image_tower(k))
            if text and lacking:
                raise PairkitError(
                    f"checkpoint {req.checkpoint} holds the image tower only ({len(lacking)} "
                    f"keys of {what}'s text tower missing, e.g. {', '.join(lacking[:3])}): "
                    "text queries need the whole model's weights; query by image or item id")
    else:
        model = load_with_cache_first(
            lambda: open_clip.create_model(name, pretrained=tag, require_pretrained=True),
            f"{what} ({tag})", offline=req.offline,
        )
    model.eval()
    return model, identity


def _openclip_visual(name: str, req: EncoderRequest, notes: list[str] | None = None
                     ) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The image tower alone of the model a request names, in eval mode: (tower, its
    preprocessing config, manifest identity). Random weights build the tower alone
    (:func:`random_visual_tower`), pretrained ones load into a meta-device model
    (:func:`pretrained_visual_tower`); a checkpoint (of the whole model or of its image
    tower alone) is fitted to the whole model, whose text tower is then dropped; its
    preprocessing is that of the tag named beside it (:func:`checkpoint_preprocess`).
    ``notes`` gets the warnings for the run."""
    notes = [] if notes is None else notes
    open_clip, tag, identity = _openclip_weights(name, req)
    what = f"openclip/{name}"
    if tag == "":  # the whole model fitted, its text tower dropped
        model, identity = _openclip_model(name, req, text=False)
        visual, preprocess_cfg = model.visual, getattr(model.visual, "preprocess_cfg", {})
        preprocess_cfg = checkpoint_preprocess(open_clip, name, req.pretrained,
                                               dict(preprocess_cfg or {}), identity, notes)
    elif tag == "none":
        visual, preprocess_cfg = random_visual_tower(open_clip, name, req.seed)
    else:
        visual, preprocess_cfg = load_with_cache_first(
            lambda: pretrained_visual_tower(open_clip, name, tag),
            f"{what} ({tag})", offline=req.offline,
        )
    return visual.eval(), preprocess_cfg, identity


def openclip_encoder(name: str, req: EncoderRequest) -> Encoder:
    """The ``openclip/NAME`` encoder: the image tower of the model a request names, its
    preprocessing and output width."""
    notes: list[str] = []
    visual, preprocess_cfg, identity = _openclip_visual(name, req, notes)
    what = f"openclip/{name}"
    cfg = dict(preprocess_cfg or {})
    size = cfg.get("size", 224)
    size = int(size[0] if isinstance(size, (tuple, list)) else size)
    preprocess = Preprocess(
        size=size,
        mean=tuple(cfg.get("mean", (0.48145466, 0.4578275, 0.40821073))),
        std=tuple(cfg.get("std", (0.26862954, 0.26130258, 0.27577711))),
        interpolation=str(cfg.get("interpolation", "bicubic")),
        resize="squash" if cfg.get("resize_mode") == "squash" else "shortest",
    )
    module = VisualOnly(visual)
    dim = getattr(visual, "output_dim", None)
    dim = int(dim) if isinstance(dim, int) else probe_dim(module, size)
    return Encoder(name=what, dim=dim, preprocess=preprocess, module=module, identity=identity,
                   notes=notes)


# the preprocessing fields a pretrained tag's config can set (its size is the model's)
_TAG_PREPROCESS = ("mean", "std", "interpolation", "resize_mode", "fill_color")


def _tag_preprocess(open_clip: Any, name: str, tag: str, base: dict[str, Any]) -> dict[str, Any]:
    tag_cfg = open_clip.get_pretrained_cfg(name, tag) or {}
    return {**base, **{k: tag_cfg[k] for k in _TAG_PREPROCESS if tag_cfg.get(k) is not None}}


def _same_preprocess(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def norm(v: Any) -> Any:
        return [round(float(x), 6) for x in v] if isinstance(v, (tuple, list)) else v

    return all(norm(a.get(k)) == norm(b.get(k)) for k in _TAG_PREPROCESS)


def checkpoint_preprocess(open_clip: Any, name: str, tag: str | None, default: dict[str, Any],
                          identity: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The preprocessing config of ``--checkpoint`` weights for open_clip model ``name``.

    open_clip keeps mean/std/interpolation/resize mode in the pretrained tag's config, not
    the model's: with ``tag`` (``--pretrained TAG`` beside ``--checkpoint``: the file holds
    TAG's weights, or a fine-tune of them) its values over ``default`` (the model's), the
    tag recorded as ``preprocess_tag``; without, ``default``, and a note naming the tags
    of this model whose preprocessing differs, when there are any."""
    if tag is not None:
        identity["preprocess_tag"] = tag
        return _tag_preprocess(open_clip, name, tag, default)
    other = [t for t in open_clip.list_pretrained_tags_by_model(name)
             if not _same_preprocess(_tag_preprocess(open_clip, name, t, default), default)]
    if other:
        shown = ", ".join(other[:6]) + (f", ... +{len(other) - 6}" if len(other) > 6 else "")
        notes.append(f"openclip/{name} --checkpoint: open_clip's default preprocessing is used "
                     f"(mean {tuple(default.get('mean', ()))}, "
                     f"{default.get('resize_mode', 'shortest')}); "
                     + (f"the tags {shown} of this model use another: if the file holds one "
                        "of their weights" if len(other) > 1 else
                        f"the tag {shown} of this model uses another: if the file holds its "
                        "weights")
                     + ", pass --pretrained TAG beside --checkpoint")
    return default


def _meta_model(open_clip: Any, name: str, **kwargs: Any) -> Any:
    """open_clip's ``create_model`` on the meta device: the structure, the preprocessing
    config and no weights (no random initialisation: milliseconds instead of seconds).
    None when the model can't be built there (a constructor that reads tensor values);
    the callers then build it the plain way, which raises whatever is really wrong."""
    try:
        with torch.device("meta"), quiet_third_party():
            return open_clip.create_model(name, device="meta", **kwargs)
    except Exception:
        return None


def _has_meta(module: Any) -> bool:
    return any(t.is_meta for t in (*module.parameters(), *module.buffers()))


def random_visual_tower(open_clip: Any, name: str, seed: int) -> tuple[Any, dict[str, Any]]:
    """The image tower of ``open_clip.create_model(name)`` after ``torch.manual_seed(seed)``,
    with the same weights, and its preprocessing config.

    CLIP and CustomTextCLIP build the image tower first, so building it alone from the same
    seed draws the same numbers; the text tower (40% of ViT-B-32's weights) is never
    initialised. Other model classes (CoCa builds its text tower first), or an open_clip
    without the builder, take the whole ``create_model``."""
    import open_clip.model as oc_model

    shell = _meta_model(open_clip, name, pretrained=None)
    build = getattr(oc_model, "_build_vision_tower", None)
    if shell is not None and build is not None and type(shell).__name__ in (
            "CLIP", "CustomTextCLIP"):
        cfg = open_clip.get_model_config(name)
        torch.manual_seed(seed)
        with quiet_third_party():
            visual = build(cfg["embed_dim"], cfg["vision_cfg"], cfg.get("quick_gelu", False),
                           None)
        want = {k: v.shape for k, v in shell.visual.state_dict().items()}
        if {k: v.shape for k, v in visual.state_dict().items()} == want:
            visual.preprocess_cfg = shell.visual.preprocess_cfg
            return visual, shell.visual.preprocess_cfg
    torch.manual_seed(seed)
    with quiet_third_party():  # open_clip logs "initialized randomly": we asked for it
        model = open_clip.create_model(name, pretrained=None)
    return model.visual, getattr(model.visual, "preprocess_cfg", {})


def pretrained_visual_tower(open_clip: Any, name: str, tag: str) -> tuple[Any, dict[str, Any]]:
    """The image tower of ``open_clip.create_model(name, pretrained=tag)`` and its
    preprocessing config: built on the meta device and the checkpoint's tensors assigned
    through open_clip's own ``load_checkpoint`` (its key conversions, strict), so no
    random initialisation runs before the weights replace it. Floating tensors end in
    float32, as when the checkpoint is copied into a float32 model. Falls back to the
    plain ``create_model`` when this open_clip has no ``load_weights`` option or a tensor
    of the tower is left on the meta device (a buffer no checkpoint holds)."""
    import inspect
    from functools import partial

    if "load_weights" in inspect.signature(open_clip.create_model).parameters:
        # (downloads the weights into the hub cache like create_model does, loads nothing)
        shell = _meta_model(open_clip, name, pretrained=tag, load_weights=False)
    else:
        shell = None
    if shell is not None:
        cfg = open_clip.get_pretrained_cfg(name, tag)
        path = open_clip.download_pretrained(cfg) if cfg else tag
        shell.load_state_dict = partial(type(shell).load_state_dict, shell, assign=True)
        try:
            with quiet_third_party():
                open_clip.load_checkpoint(shell, path, strict=True, weights_only=True)
        finally:
            del shell.load_state_dict
        if not _has_meta(shell.visual):
            visual = shell.visual.to(torch.float32)
            return visual, getattr(visual, "preprocess_cfg", {})
    with quiet_third_party():
        model = open_clip.create_model(name, pretrained=tag, require_pretrained=True)
    return model.visual, getattr(model.visual, "preprocess_cfg", {})


class VisualOnly(torch.nn.Module):
    """The image tower of a CLIP model alone; forward = encode_image."""

    def __init__(self, visual: Any) -> None:
        super().__init__()
        self.visual = visual

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.visual(pixels)


def openclip_text_encoder(name: str, req: EncoderRequest) -> Any:
    """``encode(texts) -> (n, dim) float32`` with the text tower of the open_clip model
    ``name`` built as ``req`` asks (the same weights as its image tower in
    :func:`openclip_encoder`): the text side of ``pairkit search --text``."""
    import numpy as np

    model, _ = _openclip_model(name, req)
    tokenizer = import_open_clip(name).get_tokenizer(name)
    model = model.to(req.device)

    def encode(texts: list[str]) -> np.ndarray:
        with torch.inference_mode():
            out = model.encode_text(tokenizer(list(texts)).to(req.device))
        return out.float().cpu().numpy()

    return encode
