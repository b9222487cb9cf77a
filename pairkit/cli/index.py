"""pairkit index: build and save the FAISS index of a store (reused by mine)."""

from __future__ import annotations

from pathlib import Path

import typer

from pairkit.cli.common import say, user_errors


def index(
    store: Path = typer.Argument(..., help="Store folder (from embed or import)."),
    kind: str = typer.Option(
        "auto", "--kind", help="auto | flat | ivf | ivfpq | hnsw (auto: exact up to "
        "--exact-max-rows rows, ivf above)."),
    nlist: int | None = typer.Option(None, "--nlist", help="IVF cells (default ~sqrt(N))."),
    nprobe: int | None = typer.Option(
        None, "--nprobe", help="IVF cells scanned per query, saved as the default "
        "(default max(8, nlist/32))."),
    pq_m: int | None = typer.Option(None, "--pq-m", help="ivfpq: sub-quantisers (divides dim)."),
    hnsw_m: int = typer.Option(32, "--hnsw-m", help="hnsw: links per node."),
    ef_search: int | None = typer.Option(None, "--ef-search", help="hnsw: search beam (128)."),
    exact_max_rows: int = typer.Option(
        50_000, "--exact-max-rows", help="--kind auto: exact (flat) up to this many rows."),
    float16: bool = typer.Option(False, "--float16", help="Store vectors as float16."),
    seed: int = typer.Option(0, "--seed", help="Seed of the IVF training sample."),
    force: bool = typer.Option(False, "--force", help="Rebuild an index that exists."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary line."),
) -> None:
    """Build the FAISS index of a store and save it as STORE/index/KIND.faiss.

    The index records the store's content id; mine reuses it only for the same rows.
    It is built on the CPU and saved; mine places it on all GPUs when it loads it.

    Example: pairkit index store --kind ivf
    """
    import time

    from pairkit.core.store import Store
    from pairkit.index.build import IndexSpec, build_and_save, check_saved, choose_kind

    with user_errors():
        st = Store.open(store, verify=True)
        if st.count == 0:
            from pairkit.errors import PairkitError

            raise PairkitError(f"store {store} is empty: nothing to index")
        reason = ""
        if kind == "auto":
            kind, reason = choose_kind(st.count, exact_max_rows)
        spec = IndexSpec(kind=kind, nlist=nlist, nprobe=nprobe, pq_m=pq_m, hnsw_m=hnsw_m,
                         ef_search=ef_search, float16=float16, seed=seed)
        spec = spec.resolved(st.count, st.dim)
        check_saved(st.root, spec.kind, st.content_id, force)
        t0 = time.perf_counter()
        path = build_and_save(st.vectors("float32"), spec, st.root, st.content_id, force=force)
        say(f"built {spec.describe()} over {st.count:,} rows of dim {st.dim} in "
            f"{time.perf_counter() - t0:.1f} s -> {path}" + (f" ({reason})" if reason else ""),
            quiet)
