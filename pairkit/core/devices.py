"""The one place that turns ``--device`` into a torch device name."""

from __future__ import annotations

from pairkit.errors import PairkitError


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; checks cuda:N exists."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise PairkitError(f"--device {device}: no CUDA GPU is visible (use --device cpu)")
        if ":" in device:
            try:
                index = int(device.split(":", 1)[1])
            except ValueError:
                raise PairkitError(
                    f"--device must be auto, cpu, cuda or cuda:N, got {device}"
                ) from None
            if index >= torch.cuda.device_count():
                raise PairkitError(
                    f"--device {device}: only {torch.cuda.device_count()} GPU(s) visible"
                )
        return device
    raise PairkitError(f"--device must be auto, cpu, cuda or cuda:N, got {device}")
