"""pairkit issues: outliers and likely label errors from a store's kNN graph."""

from __future__ import annotations

import typer

from pairkit.cli.common import say, user_errors
from pairkit.cli.progress import ProgressBar


def issues(
    store: str = typer.Argument(..., help="Store folder or URL (made by embed or import)."),
    checks: str | None = typer.Option(
        None, "--checks",
        help="Comma-separated detectors: outlier, label-error.",
        show_default="outlier,label-error; an unlabeled store: outlier"),
    k: int = typer.Option(10, "--k", help="Neighbours per source in the kNN graph."),
    outlier_z: float = typer.Option(
        3.5, "--outlier-z", help="Robust z-score of the mean kNN distance that flags an "
        "outlier."),
    all_rows: bool = typer.Option(
        False, "--all", help="Every source and check with its score, not only the flagged."),
    knn_graph: str | None = typer.Option(
        None, "--knn-graph", help="Also write the kNN graph (cosine distances) as a scipy "
        "sparse .npz for cleanlab's Datalab(knn_graph=...), and the store rows beside it "
        "(graph.npz: graph.ids.npy)."),
    output: str = typer.Option("-", "-o", "--output",
                               help="Table (.parquet, .csv, .jsonl); - = stdout."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing outputs."),
    quiet: bool = typer.Option(False, "--quiet", "-q",
                               help="No progress bar or summary on stderr."),
) -> None:
    """Flag outliers (far from their nearest sources) and likely label errors (labels
    their neighbours' weighted vote disagrees with), with scores and reasons.

    One row per source (its view 0). Example: pairkit issues store -o issues.csv
    """
    from pairkit.eval.data_issues import IssuesConfig
    from pairkit.eval.issues_command import issues_to_files, summary_line

    with user_errors():
        names = (None if checks is None
                 else tuple(c.strip() for c in checks.split(",") if c.strip()))
        cfg = IssuesConfig(k, names, outlier_z, all_rows, knn_graph)
        bar = ProgressBar(quiet, unit="sources")
        try:
            summary = issues_to_files(store, output, cfg, force=force, progress=bar.advance,
                                      on_start=lambda n: bar.start(n, "searching neighbours"),
                                      on_phase=bar.phase)
        finally:
            bar.stop()
        say(summary_line(summary), quiet)
    if summary["stdout_closed"]:
        raise BrokenPipeError
