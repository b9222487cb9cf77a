"""``pairkit index``: build a store's FAISS index and save it beside the store."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from pairkit.errors import PairkitError


@dataclass(frozen=True)
class IndexRequest:
    """The options of ``pairkit index`` (None: size-based defaults)."""

    kind: str = "auto"
    nlist: int | None = None
    nprobe: int | None = None
    pq_m: int | None = None
    hnsw_m: int = 32
    ef_search: int | None = None
    exact_max_rows: int = 50_000
    float16: bool = False
    seed: int = 0


def index_store(store_path: Path, request: IndexRequest, force: bool = False) -> str:
    """Build and save the index of the store at ``store_path``; return the summary line.

    An index of the same kind and options already saved for these rows is kept (a
    no-op); one saved with other options is replaced only with ``force``.
    """
    from pairkit.core.store import Store
    from pairkit.index.build import (
        IndexSpec,
        build_and_save,
        choose_kind,
        index_paths,
        saved_spec,
    )

    st = Store.open(store_path, verify=True)
    if st.count == 0:
        raise PairkitError(f"store {store_path} is empty: nothing to index")
    kind, reason = request.kind, ""
    if kind == "auto":
        kind, reason = choose_kind(st.count, request.exact_max_rows)
    spec = IndexSpec(kind=kind, nlist=request.nlist, nprobe=request.nprobe, pq_m=request.pq_m,
                     hnsw_m=request.hnsw_m, ef_search=request.ef_search,
                     float16=request.float16, seed=request.seed).resolved(st.count, st.dim)
    path = index_paths(st.root, spec.kind)[0]
    saved = saved_spec(st.root, spec.kind, st.content_id)
    if saved is not None and not force:
        if replace(saved, ef_construction=spec.ef_construction) == spec:
            return f"index {path} is up to date ({spec.describe()} over {st.count:,} rows); " \
                   "nothing to do"
        raise PairkitError(f"index {path} exists with other options ({saved.describe()}, "
                           f"asked for {spec.describe()}); pass --force to rebuild it")
    t0 = time.perf_counter()
    path = build_and_save(st.vectors("float32"), spec, st.root, st.content_id, force=force)
    return (f"built {spec.describe()} over {st.count:,} rows of dim {st.dim} in "
            f"{time.perf_counter() - t0:.1f} s -> {path}" + (f" ({reason})" if reason else ""))
