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
    alone = table.attrs.get("no_neighbours") or []
    if alone:  # a query's rows missing from the table without a word
        import sys

        print(f"note: {len(alone)} item quer{'y has' if len(alone) == 1 else 'ies have'} no "
              f"neighbours ({', '.join(alone[:3])}): every other row of the store is of "
              "their own source; --include-same-source lists those", file=sys.stderr)
    return len(table)
