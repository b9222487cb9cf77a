"""Which engine searches: FAISS (CPU or GPU indices) or the exact torch search.

``--backend auto`` (the default) picks, for the ``--device`` asked for:

1. FAISS GPU indices when faiss-gpu sees a GPU;
2. else the exact torch search (:mod:`pairkit.index.torch_search`) on CUDA when torch
   sees a GPU (faiss-cpu installed, or a CUDA-13-only machine where faiss-gpu's CUDA 12
   runtime is missing);
3. else FAISS on the CPU.

``--backend faiss`` and ``--backend torch`` force one engine; the torch search runs on the
CPU too (``--device cpu``), which is how the tests compare it with FAISS. torch is only
imported to look for a GPU when the machine has NVIDIA device files, so CPU-only runs of
table commands don't pay for ``import torch``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from pairkit.errors import PairkitError, UsageError

BACKENDS = ("auto", "faiss", "torch")


@dataclass(frozen=True)
class SearchBackend:
    """A resolved search engine: ``name`` ``faiss`` or ``torch``; ``device`` ``cpu``,
    ``cuda`` or ``cuda:N``; ``reason`` says why (for summaries)."""

    name: str = "faiss"
    device: str = "cpu"
    reason: str = ""
    auto: bool = False  # chosen by --backend auto (not asked for by name)

    @property
    def gpu(self) -> bool:
        return self.device.startswith("cuda")

    def describe(self) -> str:
        where = "GPU" if self.gpu else "CPU"
        text = f"{self.name} on {where}" if self.name == "faiss" else f"torch on {self.device}"
        return f"{text} ({self.reason})" if self.reason else text


CPU = SearchBackend("faiss", "cpu", "")


def check_device_text(device: str) -> str:
    """``device`` if it is auto, cpu, cuda or cuda:N (no import); UsageError otherwise
    (:func:`pairkit.core.devices.check_device`)."""
    from pairkit.core.devices import check_device

    return check_device(device)


def check_backend_text(backend: str) -> str:
    """``backend`` if it is one of :data:`BACKENDS`; UsageError otherwise."""
    if backend not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend}")
    return backend


def faiss_gpus() -> int:
    """GPUs FAISS can use (0 with faiss-cpu, or faiss-gpu without a working GPU)."""
    try:
        import faiss

        return int(faiss.get_num_gpus())
    except Exception:
        return 0


def ray_search(command: str, device: str = "auto", backend: str = "auto") -> SearchBackend:
    """The engine of a ``--ray`` search: FAISS on the workers' CPUs (an index built on a GPU
    here could not be shipped to them). An explicit GPU ``device`` or the torch ``backend``
    is bad usage (one line naming ``command``)."""
    if device not in ("auto", "cpu") or backend == "torch":
        raise UsageError(f"{command} --ray searches on the workers' CPUs with FAISS: use "
                         "--device cpu (or auto) and --backend faiss (or auto)"
                         + (" (PAIRKIT_RAY_ADDRESS is set: it gives --ray when not typed)"
                            if os.environ.get("PAIRKIT_RAY_ADDRESS") else ""))
    return CPU


def cuda_possible() -> bool:
    """False when no NVIDIA GPU can be visible (no device files, or CUDA_VISIBLE_DEVICES
    empty); decided without importing torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0",
                                           "/proc/driver/nvidia/version"))


def torch_cuda_devices() -> int:
    """GPUs torch sees (0 without CUDA); imports torch only when :func:`cuda_possible`."""
    if not cuda_possible():
        return 0
    try:
        import torch

        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:
        return 0


def resolve_backend(backend: str = "auto", device: str = "auto") -> SearchBackend:
    """Turn ``--backend`` and ``--device`` into a :class:`SearchBackend`.

    Raises PairkitError when the asked-for engine can't run on the asked-for device
    (``--backend faiss --device cuda`` without faiss-gpu, ``--device cuda`` without a GPU).
    """
    check_backend_text(backend)
    check_device_text(device)
    where = _resolve(backend, device)
    return replace(where, auto=True) if backend == "auto" else where


def for_index_kind(where: SearchBackend, kind: str) -> SearchBackend:
    """The engine for ``--index kind``: the torch search is exact only, so an engine that
    ``--backend auto`` chose as torch gives way to FAISS on the CPU when an approximate
    FAISS index (ivf, ivfpq, hnsw) is asked for by name. ``--backend torch`` stays (and
    refuses such a kind in one line)."""
    if where.name == "torch" and where.auto and kind not in ("auto", "flat"):
        return SearchBackend("faiss", "cpu", f"--index {kind} is a FAISS index and FAISS "
                             "sees no GPU", auto=True)
    return where


def _resolve(backend: str, device: str) -> SearchBackend:
    if device == "cpu":
        return SearchBackend("torch" if backend == "torch" else "faiss", "cpu",
                             "" if backend == "auto" else "asked for")
    index = int(device[5:]) if device.startswith("cuda:") else None
    if backend in ("auto", "faiss"):
        n = faiss_gpus()
        if n > 0 and (index is None or index < n):
            return SearchBackend("faiss", "cuda" if index is None else device,
                                 "faiss-gpu" if backend == "auto" else "asked for")
        if backend == "faiss":
            if device == "auto":
                return SearchBackend("faiss", "cpu", "FAISS sees no GPU")
            if n > 0:  # cuda:N past the GPUs FAISS sees
                raise PairkitError(f"--backend faiss --device {device}: FAISS sees only "
                                   f"{n} GPU(s) (use cuda:0 .. cuda:{n - 1})")
            raise PairkitError(
                f"--backend faiss --device {device}: FAISS sees no GPU (faiss-cpu, or "
                "faiss-gpu without its CUDA runtime); use --backend torch for an exact "
                "search on the GPU")
    gpus = torch_cuda_devices()
    if gpus and (index is None or index < gpus):
        why = "asked for" if backend == "torch" else "FAISS sees no GPU, torch does"
        return SearchBackend("torch", "cuda" if index is None else device, why)
    if device == "auto":
        if backend == "torch":
            return SearchBackend("torch", "cpu", "asked for; no GPU visible")
        return SearchBackend("faiss", "cpu", "")
    have = f"only {gpus} GPU(s) visible" if gpus else "FAISS sees no GPU and torch sees none"
    raise PairkitError(f"--device {device}: {have} (use --device cpu)")
