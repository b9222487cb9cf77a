"""The one place that turns ``--device`` and ``--precision`` into torch terms."""

from __future__ import annotations

from typing import Any

from pairkit.errors import PairkitError, UsageError

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"


def check_device(device: str) -> str:
    """``device`` if it is spelled ``auto``, ``cpu``, ``cuda`` or ``cuda:N``; else a
    UsageError (no torch import: a bad value is rejected before any heavy work)."""
    if device in ("auto", "cpu", "cuda"):
        return device
    head, _, index = device.partition(":")
    if head == "cuda" and index.isdigit():
        return device
    raise UsageError(f"--device must be {DEVICE_CHOICES}, got {device!r}")


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; checks cuda:N exists."""
    check_device(device)
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if not torch.cuda.is_available():
        raise PairkitError(f"--device {device}: no CUDA GPU is visible (use --device cpu)")
    if ":" in device and int(device.split(":", 1)[1]) >= torch.cuda.device_count():
        raise PairkitError(f"--device {device}: only {torch.cuda.device_count()} GPU(s) visible")
    return device


PRECISIONS = ("auto", "fp32", "fp16", "bf16")


def resolve_precision(precision: str, device_type: str) -> str:
    """``auto`` -> ``fp16`` on CUDA, ``fp32`` elsewhere; other values unchanged."""
    if precision == "auto":
        return "fp16" if device_type == "cuda" else "fp32"
    return precision


def autocast_dtype(precision: str) -> Any:
    """The torch dtype autocast runs in for a resolved precision; None for fp32."""
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
