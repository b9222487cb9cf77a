"""pairkit dedup: exact and near-duplicate groups of a store's sources."""

from __future__ import annotations

from typing import Literal

import typer

from pairkit.cli.common import from_environment, reader_gone, say, user_errors, warn
from pairkit.cli.options import Backend, backend_option, device_option, ray_option
from pairkit.cli.progress import ProgressBar
from pairkit.core.devices import where_it_runs
from pairkit.mine.thresholds import NEAR_DUPLICATE_THRESHOLD

DEFAULT_THRESHOLD_TEXT = str(NEAR_DUPLICATE_THRESHOLD)


def dedup(
    ctx: typer.Context,
    store: str = typer.Argument(
        ..., help="Store folder or URL (s3://...; made by embed or import)."),
    threshold: float | None = typer.Option(
        None, "--threshold", "-t", show_default=DEFAULT_THRESHOLD_TEXT,
        help="Embedding similarity for a near-duplicate, in (0, 1]; giving it uses the "
        "threshold method (and decides pairs with an unreadable image in the pixels one)."),
    method: Literal["auto", "pixels", "threshold"] = typer.Option(
        "auto", "--method",
        help="pixels: align candidate pairs on the images, threshold calibrated on copies of "
        "the store's own images; threshold: embedding similarity >= --threshold; auto: "
        "pixels when the images can be read and no --threshold is given."),
    pixel_threshold: float | None = typer.Option(
        None, "--pixel-threshold", show_default="calibrated",
        help="Aligned pixel correlation for a near-duplicate (pixels method)."),
    keep: Literal["best", "first", "largest", "central"] = typer.Option(
        "best", "--keep",
        help="Copy kept per group. best: the copy that lost least (JPEG quality, then "
        "sharpness, pixels and clipping; see docs/dedup.md), then largest file, then shortest "
        "path; first: lowest id; largest: image area, then file size; central: most similar "
        "to the others. The table's keep_reason says why."),
    output: str = typer.Option(
        "-", "-o", "--output",
        help="Table (.parquet, .csv, .jsonl; .ndjson, .json: JSON Lines too; a folder ending "
        "in /: parquet parts) or, with --paths-only, a text file; - = stdout."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output file."),
    paths_only: bool = typer.Option(
        False, "--paths-only", help="Print only paths, one a line, instead of the table."),
    drop: bool = typer.Option(
        False, "--drop", help="Only the items to remove (every member but the kept one)."),
    absolute: bool = typer.Option(
        False, "--absolute", help="Paths joined to the store's image_root (absolute)."),
    print0: bool = typer.Option(
        False, "--print0", "-0", help="With --paths-only: end paths with NUL (xargs -0)."),
    against: str | None = typer.Option(
        None, "--against", help="Another store (a test split): list this store's sources "
        "that duplicate one of its sources instead of the groups."),
    exact_only: bool = typer.Option(
        False, "--exact-only", help="Only byte-identical files (same file_sha256)."),
    batch_size: int = typer.Option(4096, "--batch-size", help="Query rows per search block."),
    device: str = device_option("Where the search runs; auto: a GPU if any, else CPU.",
                                here=False),
    backend: Backend = backend_option(),
    ray: str | None = ray_option(),
    quiet: bool = typer.Option(False, "--quiet", "-q",
                               help="No progress bar or summary on stderr."),
) -> None:
    """Find exact duplicates (file hash) and near-duplicates (embedding similarity).

    Views of one source are never duplicates of each other: each source is
    compared by its view 0. Every member of a group is within the threshold of
    the group's kept representative (long chains are split).

    Example: pairkit dedup store --paths-only --drop -0 | xargs -0 rm --
    """
    from pairkit.errors import UsageError
    from pairkit.mine.dedup import DedupConfig, against_line, summary_line
    from pairkit.mine.dedup_command import dedup_to_files

    with user_errors():
        where_it_runs(device, ray)
        if against is not None and ray:
            if not from_environment(ctx, "ray"):
                raise UsageError("dedup --against runs here: drop --ray")
            warn("PAIRKIT_RAY_ADDRESS is set; dedup --against runs here, the cluster is "
                 "not used")
            ray = None
        cfg = DedupConfig(threshold, keep, exact_only, batch_size, device, absolute, backend,
                          method, pixel_threshold)
        pairs = None
        if ray:
            from pairkit.distributed.dedup import RayPairs
            from pairkit.index.route_files import scratch_beside

            pairs = RayPairs(ray, scratch=scratch_beside(output))
        bar = ProgressBar(quiet, unit="sources")
        try:
            summary = dedup_to_files(
                store, output, cfg, against=against, paths_only=paths_only, print0=print0,
                drop=drop, force=force, warn=bar.note, pairs=pairs, progress=bar.advance,
                on_start=lambda n: bar.start(n, "searching near-duplicates"))
        finally:
            bar.stop()
        say((against_line if against is not None else summary_line)(summary), quiet)
    if summary["stdout_closed"]:
        raise reader_gone()
