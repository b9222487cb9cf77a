"""pairkit import: embeddings computed elsewhere -> a store."""

from __future__ import annotations

from pathlib import Path

import typer

from pairkit.cli.common import say, user_errors
from pairkit.cli.options import Dtype


def import_store(
    embeddings: Path = typer.Argument(..., help="A .npy file of shape (N, dim)."),
    items: str = typer.Option(
        ..., "--items", help="CSV/parquet/JSONL with 'path' (and optional source, view, label)."
    ),
    output: str = typer.Option(..., "-o", "--output",
                               help="Store folder or URL (s3://...) to create."),
    dtype: Dtype = typer.Option("float16", "--dtype", help="Storage precision of the store."),
    encoder: str = typer.Option("imported", "--encoder", help="Encoder name for the manifest."),
    force: bool = typer.Option(False, "--force", help="Replace an existing store."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary line."),
) -> None:
    """Make a store from an .npy of embeddings and a table of items.

    Rows are L2-normalised on import; rows with NaN or inf are rejected.

    Example: pairkit import emb.npy --items items.csv -o store
    """
    from pairkit.core.importer import import_embeddings
    from pairkit.core.shown import shown_text

    with user_errors():
        store = import_embeddings(embeddings, items, output, dtype=dtype, encoder=encoder,
                                  force=force)
        say(f"imported {store.count} rows of dim {store.dim} (L2-normalised) -> "
            f"{shown_text(output)}", quiet)
