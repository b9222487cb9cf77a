"""pairkit search: the nearest items of a store to image files, item ids or texts."""

from __future__ import annotations

from pathlib import Path

import typer

from pairkit.cli.common import user_errors
from pairkit.cli.options import device_option, table_output_option


def search(
    store: str = typer.Argument(
        ..., help="Store folder or URL (s3://...; from embed or import)."),
    queries: list[str] = typer.Argument(
        None, metavar="[QUERY]...", show_default=False,
        help="Image files (embedded with the store's encoder) or item ids (row numbers)."),
    text: list[str] = typer.Option(
        None, "--text", "-t", show_default=False,
        help="A text query (open_clip stores only); repeat for several."),
    k: int = typer.Option(10, "-k", "--k", help="Neighbours per query."),
    include_same_source: bool = typer.Option(
        False, "--include-same-source",
        help="Item queries: let the query item and the other views of its source count."),
    checkpoint: Path | None = typer.Option(
        None, "--checkpoint", help="The weights file of a store embedded with --checkpoint."),
    device: str = device_option("Where the query encoder runs; auto: cuda when torch sees "
                                "a GPU."),
    output: str = table_output_option(),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output file."),
) -> None:
    """Find the nearest items of a store: one row per (query, neighbour) with its rank,
    id, cosine score, path, source and label.

    Example: pairkit search store photo.jpg 12 --text "a red car" -k 5 -o hits.csv
    """
    from pairkit.index.query import QueryRequest, split_queries
    from pairkit.index.search_command import search_to_files

    with user_errors():
        images, ids = split_queries(list(queries or []))
        search_to_files(store, output, QueryRequest(
            images=images, ids=ids, texts=tuple(text or ()), k=k,
            include_same_source=include_same_source, device=device,
            checkpoint=None if checkpoint is None else str(checkpoint)), force=force)
