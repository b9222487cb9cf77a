"""pairkit index: build and save the FAISS index of a store (reused by mine)."""

from __future__ import annotations

from pathlib import Path

import typer

from pairkit.cli.common import say, user_errors
from pairkit.cli.options import Dtype, IndexKind
from pairkit.cli.progress import ProgressBar


def index(
    store: Path = typer.Argument(..., help="Store folder (from embed or import)."),
    kind: IndexKind = typer.Option(
        "auto", "--index", help="Index kind; auto: flat (exact) up to --exact-max-rows rows, "
        "ivf above."),
    nlist: int | None = typer.Option(None, "--nlist", help="IVF cells.",
                                     show_default="about sqrt(N)"),
    nprobe: int | None = typer.Option(
        None, "--nprobe", help="IVF cells scanned per query, saved with the index for mine.",
        show_default="max(8, nlist/32)"),
    pq_m: int | None = typer.Option(None, "--pq-m", help="ivfpq: sub-quantisers (divides dim).",
                                    show_default="dim/4, at most 64"),
    hnsw_m: int = typer.Option(32, "--hnsw-m", help="hnsw: links per node."),
    ef_search: int | None = typer.Option(None, "--ef-search", help="hnsw: search beam.",
                                         show_default="128"),
    exact_max_rows: int = typer.Option(
        50_000, "--exact-max-rows", help="--index auto: exact (flat) up to this many rows."),
    dtype: Dtype = typer.Option("float32", "--dtype", help="Precision of the index's vectors."),
    seed: int = typer.Option(0, "--seed", help="Seed of the IVF training sample."),
    force: bool = typer.Option(False, "--force", help="Rebuild an index that exists."),
    quiet: bool = typer.Option(False, "--quiet", "-q",
                               help="No progress (bar, phase lines) or summary line."),
) -> None:
    """Build the FAISS index of a store and save it as STORE/index/KIND.faiss.

    The index records the store's content id; mine reuses it only for the same rows.
    It is built on the CPU and saved; mine places it on the GPUs of its --device.
    A rerun on a store whose index is up to date does nothing.

    Example: pairkit index store --index ivf
    """
    from pairkit.index.command import index_to_files
    from pairkit.index.options import IndexOptions

    with user_errors():
        bar = ProgressBar(quiet, unit="rows")
        try:
            result = index_to_files(store, IndexOptions(
                kind=kind, nlist=nlist, nprobe=nprobe, pq_m=pq_m, hnsw_m=hnsw_m,
                ef_search=ef_search, exact_max_rows=exact_max_rows,
                float16=dtype == "float16", seed=seed), force=force, progress=bar.advance,
                on_start=lambda n: bar.start(n, "adding rows"), on_phase=bar.phase)
        finally:
            bar.stop()
        say(result, quiet)
