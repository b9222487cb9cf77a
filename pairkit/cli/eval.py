"""pairkit eval: kNN, linear probe, retrieval and alignment/uniformity of a store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from pairkit.cli.common import console, parse_int_list, say, user_errors, warn

_ROWS = (
    ("knn_top1", "kNN top-1 (first k)"),
    ("knn_top5", "kNN top-5 (first k)"),
    ("linear_top1", "linear probe top-1"),
    ("linear_mean_per_class_recall", "linear probe mean per-class recall"),
    ("precision_at_1", "precision@1"),
    ("r_precision", "R-precision"),
    ("map_at_r", "MAP@R"),
    ("alignment", "alignment (alpha=2, lower is better)"),
    ("uniformity", "uniformity (t=2, lower is better)"),
    ("n_queries", "queries"),
    ("n_references", "references"),
)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.4f}"


_SCORE_ROWS = (
    ("positive", "score: positive pairs, mean +- sd"),
    ("mined_negative", "score: mined negatives, mean +- sd"),
    ("random_negative", "score: random negatives, mean +- sd"),
)


def _table(results: dict[str, dict[str, Any]], reports: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="pairkit eval")
    table.add_column("metric")
    for name in results:
        table.add_column(name, justify="right")
    first = next(iter(results.values()))
    rows: list[tuple[str, list[Any]]] = []
    for key, title in _ROWS:
        if any(key in r for r in results.values()):
            rows.append((title, [_fmt(r.get(key)) for r in results.values()]))
        if key == "knn_top5":
            for k in first.get("knn", {}):
                rows.append((f"kNN k={k} top-1 / top-5",
                             [f"{_fmt(r.get('knn', {}).get(k, {}).get('top1'))} / "
                              f"{_fmt(r.get('knn', {}).get(k, {}).get('top5'))}"
                              for r in results.values()]))
        if key == "map_at_r":
            for k in first.get("recall_at_k", {}):
                rows.append((f"recall@{k}", [_fmt(r.get("recall_at_k", {}).get(k))
                                             for r in results.values()]))
    for kind, title in _SCORE_ROWS:
        cells = []
        for report in reports.values():
            v = report.scores.get(kind)
            cells.append(f"{v.mean():.3f} +- {v.std():.3f}" if v is not None and len(v) else "-")
        if any(c != "-" for c in cells):
            rows.append((title, cells))
    for title, values in rows:
        table.add_row(title, *values)
    return table


def _parse_metrics(text: str | None) -> tuple[str, ...] | None:
    if text is None or text.strip() in ("", "auto", "all"):
        return None
    return tuple(m.strip() for m in text.split(",") if m.strip())


def eval_store(
    store: Path = typer.Argument(..., help="Store to evaluate (the reference side)."),
    against: Path | None = typer.Option(
        None, "--against", help="Test store: its items are the queries, STORE the references."),
    test_fraction: float | None = typer.Option(
        None, "--test-fraction",
        help="Without --against: fraction of sources held out as queries (default 0.2)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the split, probe validation, samples."),
    head: Path | None = typer.Option(
        None, "--head", help="Head folder (pairkit train): evaluate head(vectors)."),
    compare: bool = typer.Option(False, "--compare",
                                 help="With --head: raw and head side by side."),
    metrics: str | None = typer.Option(
        None, "--metrics",
        help="Comma list of knn,linear,retrieval,geometry (default: all the data allows; a "
        "listed metric that cannot run is an error)."),
    knn_k: str = typer.Option("20", "--knn-k", help="k of the kNN classifier; a list allowed."),
    knn_temperature: float = typer.Option(0.07, "--knn-temperature",
                                          help="T in exp(sim/T) of the weighted kNN vote."),
    recall_k: str = typer.Option("1,5,10", "--recall-k", help="k values of recall@k."),
    max_r: int = typer.Option(
        1000, "--max-r",
        help="Neighbours looked at for R-precision and MAP@R; queries with more relevant "
        "references than this get lower bounds (the output says how many)."),
    gallery: str = typer.Option(
        "reference", "--retrieval-gallery",
        help="reference: queries retrieve from the references; queries: from the other "
        "queries (the query itself excluded)."),
    include_same_source: bool = typer.Option(
        False, "--include-same-source",
        help="Let other views of the query's source count as neighbours (default: excluded)."),
    pair_sample: int = typer.Option(100_000, "--pair-sample",
                                    help="Pairs sampled for alignment/uniformity/histograms."),
    probe_max_train: int = typer.Option(200_000, "--probe-max-train",
                                        help="Most reference rows the linear probe trains on."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda (probe and head)."),
    gpu: bool | None = typer.Option(
        None, "--gpu/--no-gpu", help="FAISS search on all GPUs (default: when FAISS sees one)."),
    batch_size: int = typer.Option(4096, "--batch-size", help="Queries per search block."),
    backend: str = typer.Option(
        "auto", "--backend",
        help="Search engine: auto (FAISS GPU indices when faiss-gpu sees a GPU, else the exact "
        "torch search on CUDA when torch sees one, else FAISS on the CPU), faiss or torch."),
    plot: Path | None = typer.Option(None, "--plot", help="Folder for PNG histograms and map."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing PNGs in --plot."),
    json_out: bool = typer.Option(False, "--json", help="Print the metrics as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No table or notes on stderr."),
) -> None:
    """Measure embeddings: weighted kNN, linear probe, retrieval, alignment/uniformity.

    Example: pairkit eval store --test-fraction 0.2 --knn-k 10,20 --json
    """
    from pairkit.errors import UsageError

    with user_errors():
        from pairkit.index.backend import check_backend_text

        check_backend_text(backend)
        if against is not None and test_fraction is not None:
            raise UsageError("--against and --test-fraction exclude each other")
        if compare and head is None:
            raise UsageError("--compare needs --head")
        if batch_size < 1:
            raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
        from pairkit.eval.run import EvalConfig
        from pairkit.eval.session import load_sides, run_eval

        cfg = EvalConfig(
            knn_ks=tuple(parse_int_list(knn_k, "--knn-k")),
            knn_temperature=knn_temperature,
            recall_ks=tuple(parse_int_list(recall_k, "--recall-k")),
            max_r=max_r,
            exclude_same_source=not include_same_source,
            gallery=gallery,
            metrics=_parse_metrics(metrics),
            pair_sample=pair_sample,
            probe_max_train=probe_max_train,
            seed=seed,
            device=device,
            gpu=gpu,
            backend=backend,
            block_rows=batch_size,
            collect_scores=True,
        )
        sides = load_sides(store, against, 0.2 if test_fraction is None else test_fraction, seed)
        results, reports = run_eval(sides, cfg, head, compare, plot, force)
        if not quiet:
            for name, report in reports.items():
                prefix = f"{name}: " if len(reports) > 1 else ""
                for note in report.notes:
                    warn(prefix + note)
                wd = report.details.get("linear_weight_decay")
                if wd is not None:
                    say(f"{prefix}linear probe weight decay {wd:g} (chosen on validation)")
            console().print(_table(results, reports))
            if plot is not None:
                say(f"plots -> {plot}")
        if json_out:
            payload = results if len(results) > 1 else next(iter(results.values()))
            typer.echo(json.dumps(payload))
