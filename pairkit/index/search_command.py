"""``pairkit search`` from a store folder and queries to a table file or stdout (the
command's store-to-files step): :func:`search_to_files`."""

from __future__ import annotations

import os

from pairkit.index.query import QueryRequest


def search_to_files(store: str | os.PathLike[str], output: str, cfg: QueryRequest, *,
                    force: bool = False) -> int:
    """The nearest items of the store at ``store`` for the queries of ``cfg``
    (:func:`pairkit.index.query.search_store`), written to ``output`` (``-``: stdout; the
    output is checked before any work, written atomically). Returns the rows written."""
    from pairkit.core.paths import check_output_apart
    from pairkit.core.store import Store
    from pairkit.core.tables import check_table_output, write_table
    from pairkit.index.query import search_store

    check_output_apart(output, [store])
    if output != "-":
        check_table_output(output, force)
    table = search_store(Store.open(store), cfg)
    write_table(table, output, force)
    return len(table)
