"""``pairkit index``: build a store's FAISS index and save it beside the store."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from pairkit.errors import PairkitError
from pairkit.index.options import IndexOptions


def index_store(store_path: Path, request: IndexOptions, force: bool = False) -> str:
    """Build and save the index of the store at ``store_path``; return the summary line.

    An index of the same kind and options already saved for these rows is kept (a
    no-op); one saved with other options is replaced only with ``force``. ``request``'s
    ``exact_max_rows`` (default 50,000) resolves ``auto``; its search-only fields
    (batch size, backend, device) are not used.
    """
    from pairkit.core.store import Store
    from pairkit.index.options import EXACT_MAX_ROWS_CPU, choose_kind
    from pairkit.index.saved import build_and_save, index_paths, saved_spec

    st = Store.open(store_path, verify=True)
    if st.count == 0:
        raise PairkitError(f"store {store_path} is empty: nothing to index")
    kind, reason = request.kind, ""
    if kind == "auto":
        kind, reason = choose_kind(st.count, EXACT_MAX_ROWS_CPU if request.exact_max_rows is None
                                    else request.exact_max_rows)
    spec = IndexOptions(kind=kind, nlist=request.nlist, nprobe=request.nprobe,
                        pq_m=request.pq_m, hnsw_m=request.hnsw_m, ef_search=request.ef_search,
                        float16=request.float16, seed=request.seed).resolved(st.count, st.dim)
    path = index_paths(st.root, spec.kind)[0]
    saved = saved_spec(st.root, spec.kind, st.content_id)
    if saved is not None and not force:
        if replace(saved, ef_construction=spec.ef_construction).build_fields() == \
                spec.build_fields():
            return f"index {path} is up to date ({spec.describe()} over {st.count:,} rows); " \
                   "nothing to do"
        raise PairkitError(f"index {path} exists with other options ({saved.describe()}, "
                           f"asked for {spec.describe()}); pass --force to rebuild it")
    t0 = time.perf_counter()
    path = build_and_save(st.vectors("float32"), spec, st.root, st.content_id, force=force)
    return (f"built {spec.describe()} over {st.count:,} rows of dim {st.dim} in "
            f"{time.perf_counter() - t0:.1f} s -> {path}" + (f" ({reason})" if reason else ""))
