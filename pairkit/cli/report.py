"""pairkit report: a static HTML report of pair tables, dedup groups and eval results."""

from __future__ import annotations

from pathlib import Path

import typer

from pairkit.cli.common import say, user_errors, warn
from pairkit.cli.progress import ProgressBar


def report(
    inputs: list[str] = typer.Argument(
        ..., metavar="INPUT",
        help="Pair tables (mine), dedup groups (dedup), eval JSON (eval --json) or PNG plots "
        "(eval --plot: files or their folder); - reads a table or eval JSON from stdin."),
    output: Path = typer.Option(..., "-o", "--output",
                                help="Report folder to write (index.html + thumbnails)."),
    store: str | None = typer.Option(
        None, "--store", show_default="found next to the table by its store_id or paths",
        help="Store the tables came from; gives labels and thumbnails."),
    sample: int = typer.Option(
        500, "--sample",
        help="Random anchors of a pair table (largest groups of a dedup table) in the "
        "report; 0 = all. Summaries always count the whole table."),
    seed: int = typer.Option(0, "--seed", help="Seed of the anchor sample."),
    thumb_size: int = typer.Option(96, "--thumb-size",
                                   help="Longest side of a thumbnail in pixels (16..512)."),
    title: str | None = typer.Option(None, "--title", help="Page title."),
    force: bool = typer.Option(False, "--force",
                               help="Replace an existing report folder."),
    quiet: bool = typer.Option(False, "--quiet", "-q",
                               help="No progress bar or summary (the report's path)."),
) -> None:
    """Write a self-contained HTML report (no server, no network) to look at the pairs,
    the false-negative flags, the duplicates and the scores in a browser.

    Example: pairkit report pairs.parquet duplicates.csv eval.json -o report
    """
    from pairkit.report.build import ReportConfig, build_report

    with user_errors():
        cfg = ReportConfig(inputs=tuple(inputs), output=output, store=store, sample=sample,
                           seed=seed, thumb_size=thumb_size, title=title, force=force)
        bar = ProgressBar(quiet, unit="thumbnails")
        try:
            result = build_report(
                cfg, progress=bar.advance, on_phase=bar.phase,
                on_start=lambda n: bar.start(n, "making thumbnails") if n else None)
        finally:
            bar.stop()
        for line in result.sections:
            say(line, quiet)
        for note in result.notes:
            warn(note)
        say(f"{result.thumbnails:,} thumbnails, {result.bytes / 1e6:.1f} MB, "
            f"{result.seconds:.1f} s", quiet)
        say(f"open {result.index}", quiet)
