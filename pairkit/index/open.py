"""The one way pairkit opens a search over vectors: :func:`open_searcher`.

Every command that searches (``mine``, ``dedup``, ``eval``, the rules' kNN graphs, the
Ray shard workers) asks here, with :class:`~pairkit.index.options.IndexOptions`: the
engine is resolved from ``backend`` and ``device`` (:mod:`pairkit.index.backend`), ``auto``
becomes exact or ``ivf`` by row count, a saved index for the same rows is reused
(:mod:`pairkit.index.saved`), else one is built (:mod:`pairkit.index.faiss_build`, or the
exact torch search of :mod:`pairkit.index.torch_search`) and placed on the GPUs the engine
names. The :class:`Searcher` it returns answers ``search(queries, k)`` best first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pairkit.errors import UsageError
from pairkit.index.backend import CPU, SearchBackend, for_index_kind, resolve_backend
from pairkit.index.options import (
    EXACT_MAX_ROWS_CPU,
    EXACT_MAX_ROWS_GPU,
    INDEX_CHOICES,
    IndexOptions,
    choose_kind,
)


def engine_for(options: IndexOptions) -> SearchBackend:
    """The engine that searches with ``options``: ``backend`` and ``device`` resolved
    (:func:`~pairkit.index.backend.resolve_backend`), then fitted to ``kind``
    (:func:`~pairkit.index.backend.for_index_kind`)."""
    return for_index_kind(resolve_backend(options.backend, options.device), options.kind)


@dataclass
class Searcher:
    """An index over ``vectors`` ready to search, with where it came from (for summaries).

    ``index``: the FAISS index (on the GPUs when ``gpu``) or a
    :class:`~pairkit.index.torch_search.TorchFlatIndex`; ``cpu_index`` its CPU copy
    (FAISS GPU searches fall back to it above k = 2048); ``options`` the resolved
    options (kind concrete, the saved index's build fields when ``origin`` is a path).
    """

    vectors: np.ndarray = field(repr=False)
    index: Any
    options: IndexOptions
    origin: str  # "built" or the path it was loaded from
    engine: SearchBackend = CPU
    gpu: bool = False
    reason: str = ""
    cpu_index: Any = field(default=None, repr=False)
    batch_size: int = 8192

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` (nq, k) float32/int64, best first, -inf/-1 padded.

        Candidates of a lossy index (ivfpq, float16) are re-scored exactly against
        ``vectors`` and re-sorted, so scores are always true inner products.
        """
        from pairkit.index.search import IvfListMajor, exact_scores, knn_search, sort_results

        if self.engine.name == "torch":  # exact, ties by id, any k: nothing to add
            return self.index.search(queries, k)
        # many queries against IVF-Flat: list-major batches use BLAS (same results)
        target = IvfListMajor(self.index) if IvfListMajor.worthwhile(self.index) else self.index
        # PQ scores are coarse: fetch 4x the candidates, re-score exactly, keep the best k
        refine = 4 if self.options.kind == "ivfpq" else 1
        s, i = knn_search(queries, target, min(k * refine, len(self.vectors)),
                          batch_size=self.batch_size, cpu_fallback=self.cpu_index)
        if self.options.lossy:
            s, i = sort_results(exact_scores(queries, self.vectors, i), i)
        if s.shape[1] < k:
            pad = k - s.shape[1]
            s = np.pad(s, ((0, 0), (0, pad)), constant_values=-np.inf)
            i = np.pad(i, ((0, 0), (0, pad)), constant_values=-1)
        return s[:, :k], i[:, :k]

    @property
    def excludes(self) -> bool:
        """True when :meth:`search_outside` can skip rows exactly: the exact searches (the
        torch engine; FAISS ``flat`` on the CPU, float32). Approximate and GPU indices
        can't (their callers over-fetch and drop the rows instead)."""
        return excludes_exactly(self.options, len(self.vectors), self.engine)

    @property
    def hits_independent_of_k(self) -> bool:
        """True when a search's first m hits are the same whatever its k >= m: the exact
        searches, and FAISS IVF-Flat on the CPU in float32 (the cells scanned depend on
        ``nprobe``, not k). Not IVF-PQ or float16 indices (a deeper k re-scores more
        candidates exactly), HNSW (its search list grows with k) or GPU indices."""
        if self.excludes:
            return True
        return (not self.gpu and self.engine.name != "torch" and self.options.kind == "ivf"
                and not self.options.lossy)

    def search_outside(self, queries: np.ndarray, k: int, own: np.ndarray,
                       parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` among the rows whose ``parts`` (N,) int64 differs from the
        query's ``own`` (nq,) (e.g. the rows of other labels): the rows of the query's part
        are skipped, not fetched, so the cost is that of ``k`` whatever the part's size.
        The same result as :meth:`search` with those rows filtered out; only when
        :attr:`excludes` (else :class:`~pairkit.errors.PairkitError`)."""
        from pairkit.errors import PairkitError
        from pairkit.index.outside import search_outside_parts

        if not self.excludes:
            raise PairkitError(f"internal: {self.options.kind} can't skip rows exactly")
        if self.engine.name == "torch":  # the query's part masked in each score block
            return self.index.search_masked(  # type: ignore[no-any-return]
                queries, k, None, None, query_skip=np.asarray(own, np.int64) + 1,
                base_skip=np.asarray(parts, np.int64) + 1)  # -1 -> 0: a part of its own
        return search_outside_parts(flat_rows(self.index), parts, queries, own, k,
                                    self.search)

    def describe(self) -> str:
        """E.g. ``flat on CPU, built now (auto: 6,020 rows <= 50,000, exact search)``."""
        where = "GPU" if self.gpu else "CPU"
        if self.engine.name == "torch":
            where = f"{self.engine.device} (torch)"
        src = "built now" if self.origin == "built" else f"loaded from {self.origin}"
        text = f"{self.options.describe(self.gpu)} on {where}, {src}"
        return f"{text} ({self.reason})" if self.reason else text


def excludes_exactly(options: IndexOptions, n: int,
                     engine: SearchBackend | None = None) -> bool:
    """Whether the search ``options`` open over ``n`` rows (on ``engine``, default
    :func:`engine_for` them) can skip rows exactly (:meth:`Searcher.search_outside`): the
    torch engine, or FAISS ``flat`` (``auto`` resolved) on the CPU in float32."""
    where = engine or engine_for(options)
    if where.name == "torch":
        return True
    return not where.gpu and options.cpu_kind(n) == "flat" and not options.float16


def flat_rows(index: Any) -> np.ndarray:
    """The (N, d) float32 rows an ``IndexFlatIP`` holds, as a read-only view (no copy)."""
    import faiss

    flat = faiss.downcast_index(index)
    n, d = int(flat.ntotal), int(flat.d)
    if n == 0:
        return np.zeros((0, d), np.float32)
    rows = faiss.rev_swig_ptr(flat.get_xb(), n * d).reshape(n, d)
    rows.flags.writeable = False
    return rows


def open_searcher(
    vectors: np.ndarray,
    options: IndexOptions,
    *,
    store_root: str | os.PathLike[str] | None = None,
    content_id: str | None = None,
    engine: SearchBackend | None = None,
) -> Searcher:
    """A :class:`Searcher` over ``vectors`` (N, d) as ``options`` say.

    ``engine``: an engine resolved already (default: :func:`engine_for` ``options``).
    ``store_root`` and ``content_id``: reuse the store's saved index of that kind when
    it was built for these rows. The torch engine searches exactly (``kind`` flat or
    auto) and needs no saved index. FAISS indices are placed on the GPUs when the engine
    says so.
    """
    kind = options.kind
    if kind not in INDEX_CHOICES:
        raise UsageError(f"--index must be one of {', '.join(INDEX_CHOICES)}, got {kind}")
    n, dim = vectors.shape
    where = for_index_kind(engine, kind) if engine is not None else engine_for(options)
    if where.name == "torch":
        return _torch_searcher(vectors, options, where)
    from pairkit.core.threads import import_faiss
    from pairkit.index.faiss_build import build_index, set_search_params, to_gpu
    from pairkit.index.saved import index_paths, load_index

    import_faiss()
    on_gpu = where.gpu
    reason = ""
    if kind == "auto":
        limit = options.exact_max_rows
        if limit is None:
            limit = EXACT_MAX_ROWS_GPU if on_gpu else EXACT_MAX_ROWS_CPU
        kind, reason = choose_kind(n, limit)
    spec = replace(options, kind=kind)
    index = None
    origin = "built"
    if store_root is not None and content_id is not None:
        loaded = load_index(store_root, kind, content_id, n)
        unlike = "" if loaded is None else spec.asked_otherwise(loaded[1], n, dim)
        if unlike:  # built as asked, in memory; the saved one stays for its own options
            reason = "; ".join(filter(None, [reason, f"the saved index has {unlike}: "
                                                     "not used"]))
        elif loaded is not None:
            index, saved = loaded
            # search-time knobs from the command line win over the saved ones (an nprobe
            # cut to the cells, as for an index built now)
            nprobe = options.nprobe or saved.nprobe
            if nprobe and saved.nlist:
                nprobe = min(nprobe, saved.nlist)
            spec = replace(saved, nprobe=nprobe, ef_search=options.ef_search or saved.ef_search)
            set_search_params(index, spec)
            origin = str(index_paths(store_root, kind)[0])
    if index is None:
        spec = spec.resolved(n, dim)
        reason = "; ".join(filter(None, [reason, nlist_cut(options, spec, n)]))
        # float16 on GPU is done by the cloner; the CPU index stays float32 then
        index = build_index(vectors, replace(spec, float16=spec.float16 and not on_gpu))
    cpu_index = index
    if on_gpu:
        index = to_gpu(index, float16=spec.float16, device=where.device)
    return Searcher(vectors, index, spec, origin, engine=where,
                    gpu=on_gpu and index is not cpu_index, reason=reason,
                    cpu_index=cpu_index, batch_size=options.batch_size)


def planned_description(n: int, dim: int, options: IndexOptions, engine: SearchBackend,
                        origin: str) -> str:
    """What :meth:`Searcher.describe` says of the index :func:`open_searcher` builds over
    ``n`` rows of ``dim`` on the CPU with ``options``, without building it (``origin``:
    where it is built instead, e.g. ``built on each worker``)."""
    kind, reason = options.kind, ""
    if kind == "auto":
        limit = options.exact_max_rows
        kind, reason = choose_kind(n, EXACT_MAX_ROWS_CPU if limit is None else limit)
    spec = replace(options, kind=kind).resolved(n, dim)
    reason = "; ".join(filter(None, [reason, nlist_cut(options, spec, n)]))
    text = f"{spec.describe(engine.gpu)} on {'GPU' if engine.gpu else 'CPU'}, {origin}"
    return f"{text} ({reason})" if reason else text


def nlist_cut(options: IndexOptions, spec: IndexOptions, n: int) -> str:
    """``--nlist 500 cut to the 80 rows`` when ``spec`` (``options`` resolved over ``n``
    rows) has fewer cells than asked, as ``pairkit index`` says it; else empty."""
    if options.nlist and spec.nlist is not None and options.nlist > spec.nlist:
        return f"--nlist {options.nlist} cut to the {n:,} rows"
    return ""


def exact_searcher(vectors: np.ndarray, engine: SearchBackend | None = None) -> Searcher:
    """:func:`open_searcher` of an exact index over ``vectors`` on ``engine`` (default:
    FAISS on the CPU): the searches that are not a command's main one (eval, k-means,
    kNN graphs, Ray shards)."""
    return open_searcher(vectors, IndexOptions(kind="flat"), engine=engine or CPU)


def _torch_searcher(vectors: np.ndarray, options: IndexOptions,
                    where: SearchBackend) -> Searcher:
    """The exact torch search over ``vectors`` as a :class:`Searcher`."""
    from pairkit.index.torch_search import TorchFlatIndex

    kind = options.kind
    if kind not in ("auto", "flat"):
        raise UsageError(f"the torch backend searches exactly: use --index flat or auto "
                         f"(or --backend faiss for {kind}), got --index {kind}")
    index = TorchFlatIndex(vectors, device=where.device)
    reason = f"{'auto: ' if kind == 'auto' else ''}exact search, {where.reason}".rstrip(", ")
    return Searcher(vectors, index, IndexOptions(kind="flat"), "built", engine=where,
                    gpu=where.gpu, reason=reason, batch_size=options.batch_size)
