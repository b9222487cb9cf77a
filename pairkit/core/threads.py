"""One thread budget for torch, FAISS/OpenMP, BLAS and image decoding.

Why a budget: torch and OpenMP start one thread per core by default and their parallel
regions wait for the slowest thread. When another process loads the cores, a thread of
every region is descheduled and the whole region waits: on a busy 2-core machine the demo
took 235 s with the defaults and 66 s with one thread (issue 13). pairkit therefore uses
``--threads N`` / ``PAIRKIT_THREADS`` / ``OMP_NUM_THREADS`` when given, else half the CPUs
it may run on (at least 1, at most 8), for every library at once
(docs/benchmarks.md, "Threads under load").

:func:`configure` (called by the ``pairkit`` command before any heavy import) writes the
budget into the environment, which torch, FAISS's OpenMP runtime and numpy's BLAS read when
they load; :func:`import_torch` and :func:`import_faiss` also set it explicitly on the
library (torch intra-op and inter-op pools, ``faiss.omp_set_num_threads``).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from pairkit.errors import UsageError

ENV = "PAIRKIT_THREADS"
MAX_DEFAULT = 8
# read by OpenMP (torch, FAISS), MKL, OpenBLAS and numexpr when they load
LIBRARY_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMEXPR_NUM_THREADS")


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` elsewhere)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def default_threads(cpus: int | None = None) -> int:
    """Half the CPUs, at least 1, at most 8: 1 on a 2-core laptop, 8 on a 16-core box."""
    cpus = available_cpus() if cpus is None else cpus
    return max(1, min(MAX_DEFAULT, cpus // 2))


def parse_threads(text: str | int, where: str) -> int:
    """An integer >= 1, or a UsageError naming ``where`` (an option or a variable)."""
    try:
        n = int(text)
    except (TypeError, ValueError):
        raise UsageError(f"{where} must be an integer >= 1, got {text!r}") from None
    if n < 1:
        raise UsageError(f"{where} must be an integer >= 1, got {n}")
    return n


def resolve_threads(option: int | None = None, env: dict[str, str] | None = None
                    ) -> tuple[int, str]:
    """``(threads, where it came from)``: ``--threads``, then ``PAIRKIT_THREADS``, then
    ``OMP_NUM_THREADS``, then :func:`default_threads`. ``OMP_NUM_THREADS`` is read as
    OpenMP reads it (not pairkit's setting: a scheduler's or a container's): the first
    number of a nested list (``4,2``), and a value OpenMP would not take is passed over."""
    env = os.environ if env is None else env
    if option is not None:
        return parse_threads(option, "--threads"), "--threads"
    value = env.get(ENV, "").strip()
    if value:
        return parse_threads(value, ENV), ENV
    first = env.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) >= 1:
        return int(first), "OMP_NUM_THREADS"
    return default_threads(), "default"


@dataclass(frozen=True)
class ThreadPlan:
    """Thread counts for one process, derived from one budget ``threads``."""

    threads: int  # torch intra-op, FAISS (OpenMP), BLAS
    interop: int  # torch inter-op pool
    cpus: int  # CPUs available to the process

    def decode_workers(self, device: str) -> int:
        """Decoding processes for ``embed``. Beside a GPU the encoder needs no CPU, so
        decoding gets the budget (at most 8). On the CPU the encoder uses the budget and
        images are decoded in one background thread (0 worker processes), unless the
        budget is 4 or more: then a quarter of it decodes."""
        if device.startswith("cuda"):
            return max(1, min(8, self.threads))
        return 0 if self.threads < 4 else self.threads // 4

    def encoder_threads(self, device: str) -> int:
        """torch intra-op threads while ``embed`` runs beside its decoding workers."""
        if device.startswith("cuda"):
            return self.threads
        return max(1, self.threads - self.decode_workers(device))


def plan(threads: int | None = None) -> ThreadPlan:
    """The plan for ``threads`` (None: :func:`resolve_threads` from the environment)."""
    n = resolve_threads()[0] if threads is None else parse_threads(threads, "threads")
    return ThreadPlan(threads=n, interop=1 if n <= 2 else min(4, n // 2),
                      cpus=available_cpus())


def configure(option: int | None = None) -> ThreadPlan:
    """Resolve the budget and write it into the environment (this process and its
    children) before torch, FAISS or numpy's BLAS load. Libraries already loaded are set
    directly."""
    n, _ = resolve_threads(option)
    os.environ[ENV] = str(n)
    for name in LIBRARY_ENV:
        os.environ[name] = str(n)
    # idle OpenMP threads sleep instead of spinning: spinning threads steal the CPU that a
    # descheduled peer needs (the collapse under load); no effect on a quiet machine
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    _APPLIED.clear()
    import sys

    if "torch" in sys.modules:
        import_torch()
    if "faiss" in sys.modules:
        import_faiss()
    return plan(n)


_APPLIED: set[str] = set()


def import_torch() -> Any:
    """``import torch`` with the plan applied once per process (intra- and inter-op)."""
    import torch

    if "torch" not in _APPLIED:
        p = plan()
        torch.set_num_threads(p.threads)
        # inter-op work already started (a second call in one process): its pool is fixed
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(p.interop)
        _APPLIED.add("torch")
    return torch


def import_faiss() -> Any:
    """``import faiss`` with ``faiss.omp_set_num_threads`` applied once per process."""
    import faiss

    if "faiss" not in _APPLIED:
        faiss.omp_set_num_threads(plan().threads)
        _APPLIED.add("faiss")
    return faiss
