"""``pairkit index`` from a store folder to its saved FAISS index (the command's store-to-files
step): :func:`index_to_files`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pairkit.errors import PairkitError
from pairkit.index.options import IndexOptions


def index_to_files(store: Path, cfg: IndexOptions, *, force: bool = False,
                   progress: Callable[[int], None] | None = None,
                   on_start: Callable[[int], None] | None = None,
                   on_phase: Callable[[str], None] | None = None) -> str:
    """Build and save the index of the store at ``store`` beside it (``STORE/index/``);
    return the summary line.

    An index of the same kind and options already saved for these rows is kept (a
    no-op); one saved with other options is replaced only with ``force``. ``cfg``'s
    ``exact_max_rows`` (default 50,000) resolves ``auto``; its search-only fields
    (batch size, backend, device) are not used. ``on_phase(line)`` (what starts: the
    IVF training, the HNSW graph), ``on_start(rows)`` and ``progress(m)`` per block of rows
    added (adding up to the rows): the build's progress hook
    (:func:`pairkit.index.faiss_build.build_index`); none is called when the saved index
    is up to date.
    """
    from pairkit.core.store import Store
    from pairkit.index.options import EXACT_MAX_ROWS_CPU, choose_kind, index_seed

    cfg.check_knobs()
    from pairkit.index.saved import build_and_save, index_paths, saved_spec

    st = Store.open(store, verify=True)
    if st.count == 0:
        raise PairkitError(f"store {store} is empty: nothing to index")
    kind, reason = cfg.kind, ""
    if kind == "auto":
        kind, reason = choose_kind(st.count, EXACT_MAX_ROWS_CPU if cfg.exact_max_rows is None
                                    else cfg.exact_max_rows)
    spec = IndexOptions(kind=kind, nlist=cfg.nlist, nprobe=cfg.nprobe,
                        pq_m=cfg.pq_m, hnsw_m=cfg.hnsw_m, ef_search=cfg.ef_search,
                        float16=cfg.float16, seed=index_seed(cfg.seed)).resolved(st.count, st.dim)
    path = index_paths(st.root, spec.kind)[0]
    saved = None if force else saved_spec(st.root, spec.kind, st.content_id)
    if saved is not None:
        # as resolved now (an older pairkit recorded the other kinds' knobs too)
        saved = replace(saved, ef_construction=spec.ef_construction).resolved(st.count,
                                                                               st.dim)
        if saved.build_fields() == spec.build_fields():
            return f"index {path} is up to date ({spec.describe()} over {st.count:,} rows); " \
                   "nothing to do"
        what = saved.differences(spec)
        raise PairkitError(f"index {path} exists with other options ({what}); pass --force "
                           "to rebuild it")
    if cfg.nlist and spec.nlist is not None and cfg.nlist > spec.nlist:
        reason = "; ".join(filter(None, [reason, f"--nlist {cfg.nlist} cut to the "
                                                 f"{st.count:,} rows"]))
    if cfg.nprobe and spec.nprobe is not None and cfg.nprobe > spec.nprobe:
        reason = "; ".join(filter(None, [reason, f"--nprobe {cfg.nprobe} cut to the "
                                                 f"{spec.nlist:,} cells"]))
    t0 = time.perf_counter()
    path = build_and_save(st.vectors("float32"), spec, st.root, st.content_id, force=force,
                          progress=progress, on_start=on_start, on_phase=on_phase)
    return (f"built {spec.describe()} over {st.count:,} rows of dim {st.dim} in "
            f"{time.perf_counter() - t0:.1f} s -> {path}" + (f" ({reason})" if reason else ""))
