"""Building FAISS indices over a store's vectors and placing them on GPUs.

GPU placement (``device``): ``cuda`` clones a CPU-built index onto all GPUs FAISS sees,
rows sharded across them, ``cuda:N`` onto GPU N alone; optionally with float16 storage.
FAISS GPU search handles k <= 2048 only (:func:`pairkit.index.search.knn_search` falls
back to a CPU copy above that).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pairkit.core.threads import import_faiss
from pairkit.errors import PairkitError
from pairkit.index.backend import faiss_gpus
from pairkit.index.options import IndexOptions

ADD_BLOCK_ROWS = 65_536  # rows converted to float32 and added to a flat index at a time


def build_index(vectors: Any, spec: IndexOptions, *,
                progress: Callable[[int], None] | None = None,
                on_start: Callable[[int], None] | None = None,
                on_phase: Callable[[str], None] | None = None) -> Any:
    """Build a CPU FAISS index of ``spec.kind`` over ``vectors`` (N, d) (rows in id order).

    ``spec`` must be :meth:`IndexOptions.resolved`. IVF training uses a seeded sample of
    at most 64 x nlist rows. Returns the FAISS index (ids = row numbers).

    ``vectors`` may be rows read in place from a store's shards
    (:class:`pairkit.core.shard_rows.ShardRows`): then no float32 copy of them is made;
    the training sample is gathered and the rows are added ``ADD_BLOCK_ROWS`` at a time
    (the same index: tests/index/test_half_ivf.py), and an ``ivf`` index whose cells are
    long enough for the list-major search (:meth:`pairkit.index.search.IvfListMajor.worthwhile`)
    is a :class:`pairkit.index.half_ivf.HalfIvf`, its lists in the store's dtype (float16:
    half of ``IndexIVFFlat``'s memory). HNSW needs the rows in memory (refused here).

    The progress hook (``pairkit index``): ``on_phase(line)`` says what starts (the IVF
    training, the HNSW graph's one-step add); ``on_start(N)`` before the rows are added and
    ``progress(m)`` after each block of ``m`` rows added (they add up to N; an HNSW index
    and a list-major IVF index add theirs in one step).
    """
    faiss = import_faiss()
    n, d = vectors.shape
    metric = faiss.METRIC_INNER_PRODUCT
    sq16 = faiss.ScalarQuantizer.QT_fp16
    in_memory = isinstance(vectors, np.ndarray)
    say = on_phase or (lambda _: None)

    def add_blocks(index: Any) -> Any:
        """Rows added ``ADD_BLOCK_ROWS`` at a time (flat and IVF: the same index as one
        add: each row is stored, or assigned to its cell and encoded, by itself)."""
        if on_start is not None:
            on_start(n)
        for s in range(0, n, ADD_BLOCK_ROWS):
            block = np.ascontiguousarray(vectors[s:s + ADD_BLOCK_ROWS], dtype=np.float32)
            index.add(block)
            if progress is not None:
                progress(len(block))
        return index

    if spec.kind == "flat":
        return add_blocks(
            faiss.IndexScalarQuantizer(d, sq16, metric) if spec.float16 else faiss.IndexFlatIP(d)
        )
    if spec.kind in ("ivf", "ivfpq"):
        say(f"training the {spec.kind} index's {spec.nlist:,} cells")
        index, quantizer = trained_ivf(vectors, spec)
        if not in_memory and spec.kind == "ivf" and not spec.float16 \
                and n >= 256 * int(spec.nlist):
            from pairkit.index.half_ivf import build_half_ivf

            if on_start is not None:
                on_start(n)
            half = build_half_ivf(vectors, quantizer, int(spec.nprobe))
            if progress is not None:
                progress(n)
            return half
        return add_blocks(index)
    elif spec.kind == "hnsw":
        if not in_memory:
            raise PairkitError("an hnsw index is built from vectors in memory")
        if spec.float16:
            index = faiss.IndexHNSWSQ(d, sq16, spec.hnsw_m, metric)
        else:
            index = faiss.IndexHNSWFlat(d, spec.hnsw_m, metric)
        index.hnsw.efConstruction = spec.ef_construction
        index.hnsw.efSearch = spec.ef_search
    else:  # pragma: no cover - resolved() rejects it
        raise PairkitError(f"unknown index kind {spec.kind}")
    # one add: the graph is built in one pass over every row (blocks would give another)
    say(f"linking {n:,} rows into the hnsw graph (one step)")
    if on_start is not None:
        on_start(n)
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    if progress is not None:
        progress(n)
    return index


def trained_ivf(vectors: Any, spec: IndexOptions) -> tuple[Any, Any]:
    """``(index, quantizer)``: the empty ``ivf`` / ``ivfpq`` index of ``spec`` trained on
    a seeded sample of at most 64 x nlist rows of ``vectors`` (all of them when fewer;
    an array or rows read on demand: the sample's values are the same)."""
    faiss = import_faiss()
    n, d = vectors.shape
    metric = faiss.METRIC_INNER_PRODUCT
    quantizer = faiss.IndexFlatIP(d)
    if spec.kind == "ivfpq":
        if n < 1000:
            raise PairkitError(f"an ivfpq index needs at least 1000 rows, the store has {n}")
        # 8-bit codebooks want 39 x 256 training rows; smaller stores get fewer bits
        nbits = max(4, min(8, int(math.log2(min(n, 64 * int(spec.nlist), 10_000) / 39))))
        index = faiss.IndexIVFPQ(quantizer, d, spec.nlist, spec.pq_m, nbits, metric)
    elif spec.float16:
        index = faiss.IndexIVFScalarQuantizer(quantizer, d, spec.nlist,
                                              faiss.ScalarQuantizer.QT_fp16, metric)
    else:
        index = faiss.IndexIVFFlat(quantizer, d, spec.nlist, metric)
    index.cp.seed = spec.seed
    # the cells are pairkit's choice (default_nlist keeps 39 rows per cell) or the user's
    # --nlist: no raw FAISS warning for fewer training rows than it likes
    index.cp.min_points_per_centroid = 1
    max_train = max(64 * int(spec.nlist), 10_000 if spec.kind == "ivfpq" else 0)
    if n > max_train:
        rng = np.random.default_rng(spec.seed)
        train = vectors[np.sort(rng.choice(n, size=max_train, replace=False))]
    else:
        train = vectors[:n]
    index.train(np.ascontiguousarray(train, dtype=np.float32))
    index.nprobe = spec.nprobe
    return index, quantizer


def set_search_params(index: Any, spec: IndexOptions) -> None:
    """Apply the search-time knobs (nprobe, ef_search) of ``spec`` to ``index``."""
    import faiss

    if spec.kind in ("ivf", "ivfpq") and spec.nprobe:
        ivf = faiss.extract_index_ivf(index)
        ivf.nprobe = int(spec.nprobe)
    if spec.kind == "hnsw" and spec.ef_search:
        faiss.downcast_index(index).hnsw.efSearch = int(spec.ef_search)


def to_gpu(index: Any, float16: bool = False, device: str = "cuda") -> Any:
    """Clone a CPU index onto all visible GPUs (``device`` ``cuda``), rows sharded across
    them, or onto GPU N alone (``cuda:N``).

    ``float16`` stores vectors (and IVF lists) in half precision on the GPUs.
    Returns the GPU index; HNSW has no GPU version and is returned unchanged.
    """
    import faiss

    if isinstance(faiss.downcast_index(index), faiss.IndexHNSW):
        return index
    co = faiss.GpuMultipleClonerOptions()
    co.shard = True
    co.useFloat16 = bool(float16)
    gpus = list(range(faiss_gpus()))
    if device.startswith("cuda:"):
        gpus = [int(device[5:])]
    resources = [faiss.StandardGpuResources() for _ in gpus]
    gpu_index = faiss.index_cpu_to_gpu_multiple_py(resources, index, co, gpus=gpus)
    gpu_index.referenced_objects = resources  # the GPU resources must outlive the index
    return gpu_index


def is_cpu(index: Any) -> bool:
    return "Gpu" not in type(index).__name__ and "IndexShards" not in type(index).__name__
