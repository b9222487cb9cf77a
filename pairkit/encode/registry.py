"""Encoder registry: a model name maps to a factory that builds an :class:`Encoder`.

Names are ``openclip/MODEL``, ``timm/MODEL``, ``pixels`` and anything a
plugin or test suite registers with :func:`register_encoder`. The factory gets
one frozen :class:`EncoderRequest` and returns an :class:`Encoder` whose
:class:`Preprocess` says how images must be prepared (size, mean, std), so the
data pipeline and the model agree in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pairkit.errors import PairkitError, UsageError

if TYPE_CHECKING:
    import torch

DEFAULT_MODEL = "openclip/ViT-B-32"
DEFAULT_OPENCLIP_TAG = {"ViT-B-32": "laion2b_s34b_b79k"}


@dataclass(frozen=True)
class Preprocess:
    """How an image becomes the encoder's input: square ``size`` pixels, then
    ``(x / 255 - mean) / std`` per channel. ``resize`` is ``shortest`` (resize the
    short side, centre-crop), ``squash`` (resize both sides) or ``border`` (resize the
    long side, pad with the mean colour).

    ``crop_pct`` (timm's eval transform, :func:`pairkit.encode.views.timm_view`): resize
    to ``floor(size / crop_pct)`` that way, then centre-crop (or pad) to ``size``. None:
    the resize goes to ``size`` itself (open_clip, pixels, and timm stores of pairkit
    before crop_pct was applied); not recorded then."""

    size: int
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    interpolation: str = "bicubic"
    resize: str = "shortest"
    crop_pct: float | None = None

    def record(self) -> dict[str, Any]:
        """The manifest's ``encoder.preprocess`` (``crop_pct`` only when set)."""
        out = asdict(self)
        if self.crop_pct is None:
            del out["crop_pct"]
        return out


@dataclass(frozen=True)
class EncoderRequest:
    """What the user asked for on the command line."""

    model: str
    pretrained: str | None = None  # None: the model's default tag; "none": random weights
    checkpoint: str | None = None
    device: str = "cpu"
    seed: int = 0
    offline: bool = False  # load weights from the hub cache only (no download attempt)
    image_size: int | None = None  # None: the model's own input size
    # the encoder.preprocess of the store resumed or queried (None: a new store)
    recorded_preprocess: dict[str, Any] | None = None


@dataclass
class Encoder:
    """A loaded encoder: ``forward`` maps a float batch (B, 3, S, S), already
    normalised with ``preprocess``, to embeddings (B, dim)."""

    name: str
    dim: int
    preprocess: Preprocess
    module: torch.nn.Module
    identity: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # warnings for the run, not recorded

    def describe(self) -> dict[str, Any]:
        """What the manifest records about this encoder."""
        return {"name": self.name, **self.identity, "preprocess": self.preprocess.record()}


EncoderFactory = Callable[[str, EncoderRequest], Encoder]
_REGISTRY: dict[str, EncoderFactory] = {}


def register_encoder(prefix: str, factory: EncoderFactory) -> None:
    """Register ``factory`` for names equal to ``prefix`` or starting with ``prefix/``.

    The factory is called with the part after ``prefix/`` (or "") and the request.
    """
    _REGISTRY[prefix] = factory


def unregister_encoder(prefix: str) -> None:
    _REGISTRY.pop(prefix, None)


def registered_prefixes() -> list[str]:
    _ensure_builtins()
    return sorted(_REGISTRY)


def split_model_name(model: str) -> tuple[str, str]:
    """``openclip/ViT-B-32`` -> (``openclip``, ``ViT-B-32``); ``pixels`` -> (``pixels``, "")."""
    prefix, _, rest = model.partition("/")
    return prefix, rest


BUILTIN_PREFIXES = ("openclip", "timm", "pixels")
PIXELS_SIZE = 64  # the side the pixels encoder computes its features at


def check_model_name(model: str) -> None:
    """Refuse a ``--model`` whose prefix no encoder is registered for, without importing
    torch; a bare open_clip or timm name gets a "did you mean" (open_clip spells models
    ``ViT-B-32``, ``RN50``: upper case or dashes; timm ``resnet50``, ``vit_small_...``)."""
    prefix, _ = split_model_name(model)
    if prefix in BUILTIN_PREFIXES or prefix in _REGISTRY:
        return
    known = ", ".join(sorted({*BUILTIN_PREFIXES, *_REGISTRY}))
    hint = ""
    if "/" not in model and model:
        library = "openclip" if any(c.isupper() or c == "-" for c in model) else "timm"
        hint = f"did you mean {library}/{model}? "
    raise UsageError(f"unknown model {model!r}: {hint}use openclip/NAME, timm/NAME or "
                       f"pixels (registered: {known})")


def load_encoder(request: EncoderRequest) -> Encoder:
    """Build the encoder a request names; raise PairkitError with a one-line reason."""
    check_model_name(request.model)
    _ensure_builtins()
    prefix, rest = split_model_name(request.model)
    factory = _REGISTRY.get(prefix)
    if factory is None:
        raise UsageError(
            f"unknown model {request.model!r}: use openclip/NAME, timm/NAME or pixels "
            f"(registered: {', '.join(sorted(_REGISTRY))})"
        )
    encoder = factory(rest, request)
    if request.image_size is not None and request.image_size != encoder.preprocess.size:
        encoder = resized(encoder, request.image_size)
    if request.recorded_preprocess is not None:
        encoder = as_recorded(encoder, request.recorded_preprocess)
    return encoder


def as_recorded(encoder: Encoder, recorded: dict[str, Any]) -> Encoder:
    """``encoder`` as the store that recorded preprocessing ``recorded`` was made: a store
    of a pairkit that did not apply timm's ``crop_pct`` (none recorded) keeps its resize
    to the input size itself and its resize mode, so one store never mixes two
    preprocessings (its rows and its image queries alike); a note says so."""
    pre = encoder.preprocess
    if pre.crop_pct is None or "crop_pct" in recorded:
        return encoder
    old = replace(pre, crop_pct=None, resize=str(recorded.get("resize", "shortest")))
    note = (f"this store was embedded by an earlier pairkit that did not apply {encoder.name}'s "
            f"crop_pct {pre.crop_pct} (crop_mode {pre.resize}): it keeps its own preprocessing "
            "(short side to the input size, centre crop); pass --force to embed it again "
            "with the model's")
    return replace(encoder, preprocess=old, notes=[*encoder.notes, note])


def resized(encoder: Encoder, size: int) -> Encoder:
    """``encoder`` fed ``size`` x ``size`` images instead of its own input size (a CNN
    with global pooling takes any size; a model with a fixed grid, such as a ViT, does not:
    PairkitError). The width is probed again on the new size."""
    from pairkit.encode.model_loading import probe_dim

    if encoder.name == "pixels":
        raise PairkitError("--image-size does not apply to --model pixels (its features are "
                           f"computed at {encoder.preprocess.size} px)")
    try:
        dim = probe_dim(encoder.module, size)
    except Exception as exc:  # noqa: BLE001 - any failure of the model on that size
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise PairkitError(f"{encoder.name} does not take {size} x {size} images (its input "
                           f"size is {encoder.preprocess.size}): {first}") from None
    if dim != encoder.dim:
        raise PairkitError(f"{encoder.name} gives {dim} dims at {size} px against {encoder.dim} "
                           f"at its own {encoder.preprocess.size} px: --image-size needs a "
                           "model whose width does not depend on the input size")
    return replace(encoder, preprocess=replace(encoder.preprocess, size=size),
                   identity={**encoder.identity, "image_size": size})


def _ensure_builtins() -> None:
    if "openclip" in _REGISTRY and "timm" in _REGISTRY and "pixels" in _REGISTRY:
        return
    from pairkit.encode.models import register_builtins

    register_builtins()
