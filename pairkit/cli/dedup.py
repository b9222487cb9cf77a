"""pairkit dedup: exact and near-duplicate groups of a store's sources."""

from __future__ import annotations

import time
from typing import Literal

import typer

from pairkit.cli.common import reader_gone, say, user_errors, warn
from pairkit.cli.options import Backend, backend_option, device_option, ray_option
from pairkit.mine.thresholds import NEAR_DUPLICATE_THRESHOLD

DEFAULT_THRESHOLD_TEXT = str(NEAR_DUPLICATE_THRESHOLD)


def dedup(
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
        help="Table (.parquet, .csv, .jsonl) or, with --paths-only, any file; - = stdout."),
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
    device: str = device_option("Where the search runs; auto: a GPU if any, else CPU."),
    backend: Backend = backend_option(),
    ray: str | None = ray_option(),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on stderr."),
) -> None:
    """Find exact duplicates (file hash) and near-duplicates (embedding similarity).

    Views of one source are never duplicates of each other: each source is
    compared by its view 0. Every member of a group is within the threshold of
    the group's kept representative (long chains are split).

    Example: pairkit dedup store --paths-only --drop -0 | xargs -0 rm --
    """
    from pairkit.core.options import table_output
    from pairkit.errors import UsageError
    from pairkit.mine.dedup import (
        DedupConfig,
        against_line,
        run_against,
        run_dedup,
        summary_line,
        write_paths,
    )

    with user_errors():
        if print0 and not paths_only:
            raise UsageError("--print0 needs --paths-only")
        if against is not None and drop:
            raise UsageError("--drop does not apply to --against: every row is a leak")
        if not paths_only:
            table_output(output)
        if output != "-":
            from pairkit.core.atomic import check_output
            from pairkit.core.paths import check_output_apart
            from pairkit.core.tables import check_table_output

            check_output_apart(output, [store])
            (check_output if paths_only else check_table_output)(output, force)
        t0 = time.perf_counter()
        cfg = DedupConfig(store, threshold, keep, exact_only, batch_size, device, absolute,
                          backend, method, pixel_threshold)
        if against is not None:
            if ray:
                raise UsageError("dedup --against runs here: drop --ray")
            table, summary = run_against(cfg, against, warn)
        else:
            pairs = None
            if ray:
                from pairkit.distributed.dedup import RayPairs

                pairs = RayPairs(ray)
            table, summary = run_dedup(cfg, warn, pairs)
        if drop:
            table = table[~table["keep"]].reset_index(drop=True)
        try:
            if paths_only:
                write_paths(table["path"].tolist(), output, force, "\0" if print0 else "\n")
            else:
                from pairkit.core.tables import write_table

                write_table(table, output, force)
            gone = False
        except BrokenPipeError:
            gone = True  # `| head`: not an error; the summary still goes to stderr
        summary["seconds"] = time.perf_counter() - t0
        say((against_line if against is not None else summary_line)(summary), quiet)
    if gone:
        raise reader_gone()
