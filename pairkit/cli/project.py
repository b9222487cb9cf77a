"""pairkit project: a store through a trained head -> a new store."""

from __future__ import annotations

from pathlib import Path

import typer

from pairkit.cli.common import say, user_errors
from pairkit.cli.options import Dtype, device_option


def project(
    store: str = typer.Argument(..., help="Store folder (or s3:// URL) to project."),
    head: Path = typer.Option(..., "--head", help="Head folder written by pairkit train."),
    output: str = typer.Option(..., "-o", "--output", help="New store folder (or URL)."),
    device: str = device_option("Where the head runs; auto: cuda when torch sees a GPU."),
    batch_size: int = typer.Option(65536, "--batch-size", help="Rows per forward pass."),
    dtype: Dtype | None = typer.Option(
        None, "--dtype", help="Storage precision of the new store.", show_default="the input's"),
    force: bool = typer.Option(False, "--force", help="Replace an existing store."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary line."),
) -> None:
    """Write the head's projected, L2-normalised embeddings as a new store (same items).

    Example: pairkit project store --head head -o store-projected
    """
    from pairkit.core.shown import shown_text
    from pairkit.train.project_command import ProjectConfig, project_to_files

    with user_errors():
        result = project_to_files(store, output, ProjectConfig(
            head, device=device, batch_size=batch_size, dtype=dtype), force=force)
        if not result.head_complete:
            from pairkit.cli.common import warn

            warn(f"head {shown_text(str(head))} did not finish training (its last completed "
                 "epoch is used)")
        say(f"projected {result.count} rows {result.in_dim}->{result.out_dim} with head "
            f"{shown_text(str(head))} -> {shown_text(output)}", quiet)
