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


def no_gpu_at_all() -> bool:
    """True when this machine certainly has no CUDA GPU to offer, told without torch: on
    Linux no NVIDIA driver (/proc/driver/nvidia) and no /dev/nvidia0, or
    CUDA_VISIBLE_DEVICES hides every GPU. False when it can't tell (then torch decides)."""
    import os
    import sys

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return True
    if not sys.platform.startswith("linux"):
        return False
    return not os.path.exists("/proc/driver/nvidia") and not os.path.exists("/dev/nvidia0")


def check_gpu_present(device: str) -> str:
    """``device``; a PairkitError (exit 1, before any heavy import) for ``cuda``/``cuda:N``
    on a machine that has no GPU at all (:func:`no_gpu_at_all`)."""
    if device.startswith("cuda") and no_gpu_at_all():
        raise PairkitError(f"--device {device}: no CUDA GPU is visible (use --device cpu)")
    return device


def where_it_runs(device: str, ray: str | None = None, here: bool = False) -> None:
    """A command's first check of ``--device`` and ``--ray``, before any heavy import: an
    empty ``--ray`` (an unset variable in ``--ray "$ADDR"``) is bad usage, not a local
    run; a GPU device on a machine that has none is a failure (exit 1) where the device is
    this machine's: without ``--ray``, or with it where ``here`` (eval's probe and head run
    here). Otherwise the workers' devices count: the command checks them."""
    if ray is not None and not ray.strip():
        raise UsageError("--ray needs an address: local, auto or HOST:PORT (it was empty)")
    if ray is None or here:
        check_gpu_present(device)


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


def host_tensor(array: Any) -> Any:
    """``torch.from_numpy(array)``, read-only arrays included: a store's cached vectors
    (:meth:`pairkit.core.store.Store.vectors`) are read-only and torch warns about every
    such array it wraps; the callers here only read through the tensor (or copy it to a
    device)."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)
