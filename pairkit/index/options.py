"""How a command searches its store: the ``--index``/``--device``/``--backend`` options."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IndexOptions:
    """How ``mine`` finds candidates (see :func:`pairkit.index.build.prepare_index`)."""

    kind: str = "auto"
    nprobe: int | None = None
    ef_search: int | None = None
    nlist: int | None = None
    exact_max_rows: int | None = None
    float16: bool = False
    batch_size: int = 8192
    backend: str = "auto"  # auto, faiss, torch (pairkit.index.backend)
    device: str = "auto"  # where the search runs: auto, cpu, cuda, cuda:N
