"""``pairkit issues`` from a store folder to a table of outliers and likely label errors
and, with ``--knn-graph``, the kNN graph as a sparse ``.npz`` (the command's store-to-files
step): :func:`issues_to_files`. The detectors: :mod:`pairkit.eval.data_issues`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.errors import UsageError
from pairkit.eval.data_issues import (
    COLUMNS,
    DEFAULT_CHECKS,
    IssuesConfig,
    KnnGraph,
    check_issue_options,
    find_issues,
    to_csr,
)

if TYPE_CHECKING:
    import pandas as pd


def issues_to_files(store: str | Path, output: str, cfg: IssuesConfig, *,
                    force: bool = False, progress: Callable[[int], None] | None = None,
                    on_start: Callable[[int], None] | None = None,
                    on_phase: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the checks on one row per source (its lowest view) of the store at ``store``,
    write the kNN graph when ``cfg.knn_graph`` names a file, and the table (flagged rows,
    or all with ``cfg.all_rows``) to ``output`` (``-``: stdout). Outputs are checked before
    any work and written atomically. Returns the summary, with ``seconds`` and
    ``stdout_closed`` (the reader of ``-`` went away: not an error). ``on_start``/
    ``progress``: the kNN search's progress hook (``on_start(sources)``, then
    ``progress(m)`` per block of sources, adding up to it); ``on_phase(line)`` as each
    detector starts."""
    from pairkit.core.options import table_output
    from pairkit.core.paths import check_output_apart
    from pairkit.core.tables import check_table_output

    table_output(output)
    # the checks the store's labels don't decide, before it is read (pandas)
    check_issue_options(("outlier",) if cfg.checks is None else cfg.checks, cfg.k,
                        cfg.outlier_z, True)
    graph_files = None if not cfg.knn_graph else graph_outputs(cfg.knn_graph)
    check_output_apart(output, [store])
    check_output_apart(cfg.knn_graph, [store], "--knn-graph")
    if output != "-":
        check_table_output(output, force)
    if graph_files is not None:
        from pairkit.core.atomic import check_output

        for path in graph_files:
            check_output(path, force)
    t0 = time.perf_counter()
    from pairkit.core.tables import reader_gone, write_table

    table, summary, graph, rows = issues_table(store, cfg, progress, on_start, on_phase)
    if graph_files is not None:
        write_graph(graph, rows, cfg.knn_graph, force)
    summary["stdout_closed"] = reader_gone(lambda: write_table(table, output, force))
    summary["seconds"] = time.perf_counter() - t0
    return summary


def issues_table(store: str | Path, cfg: IssuesConfig,
                 progress: Callable[[int], None] | None = None,
                 on_start: Callable[[int], None] | None = None,
                 on_phase: Callable[[str], None] | None = None
                 ) -> tuple[pd.DataFrame, dict[str, Any], KnnGraph, np.ndarray]:
    """The checks of ``cfg`` on one row per source (its lowest view) of the store at
    ``store``: ``(table, summary, knn graph, the graph's store rows)``; the table holds
    the flagged rows (every row with ``cfg.all_rows``), by issue, score descending, id
    (:data:`~pairkit.eval.data_issues.COLUMNS`); ``progress``/``on_start``: the kNN
    search's progress hook and ``on_phase`` (:func:`~pairkit.eval.data_issues.find_issues`)."""
    import pandas as pd

    from pairkit.core.store import Store
    from pairkit.mine.near_duplicates import source_nodes

    st = Store.open(store)
    items = st.items
    labels_all = st.labels()
    if cfg.checks is not None:  # as asked: label-error on an unlabeled store is refused
        checks = tuple(cfg.checks)
    else:  # the default: label-error only where there are labels
        checks = DEFAULT_CHECKS if labels_all is not None else ("outlier",)
    check_issue_options(checks, cfg.k, cfg.outlier_z, labels_all is not None)
    _, rows = source_nodes(len(items), items["source"].to_numpy(dtype=object),
                           items["view"].to_numpy())
    vectors = st.vectors(np.float32)[rows]
    labels = None if labels_all is None else np.asarray(labels_all, dtype=object)[rows]
    found, graph, names = find_issues(vectors, labels, checks=checks, k=cfg.k,
                                      outlier_z=cfg.outlier_z, stored_as=st.dtype,
                                      progress=progress, on_start=on_start,
                                      on_phase=on_phase)
    paths = items["path"].to_numpy(dtype=object)[rows]
    parts = []
    for check, det in found.items():
        sugg = np.full(len(rows), None, dtype=object)
        if names is not None:
            has = det.suggested >= 0
            sugg[has] = names[det.suggested[has]]
        parts.append(pd.DataFrame({
            "id": rows, "path": paths,
            "label": labels if labels is not None else np.full(len(rows), None, object),
            "issue": check, "score": det.score, "flagged": det.flag,
            "suggested_label": sugg, "reason": det.reason}))
    table = pd.concat(parts, ignore_index=True)
    summary = {"sources": len(rows), "k": graph.ids.shape[1], "k_asked": cfg.k,
               **{c: int(d.flag.sum()) for c, d in found.items()}}
    if not cfg.all_rows:
        table = table[table["flagged"]]
    table = table.sort_values(["issue", "score", "id"], ascending=[True, False, True],
                              kind="stable").reset_index(drop=True)
    return table[list(COLUMNS)].reset_index(drop=True), summary, graph, rows


def graph_outputs(output: str) -> tuple[Path, Path]:
    """The two files ``--knn-graph OUTPUT`` writes: ``OUTPUT`` (must end in .npz) and the
    store rows beside it (``graph.npz`` -> ``graph.ids.npy``). UsageError for another
    suffix."""
    target = Path(output)
    if target.suffix != ".npz":
        raise UsageError(f"--knn-graph must end in .npz, got {output}")
    return target, target.with_suffix(".ids.npy")


def write_graph(graph: KnnGraph, rows: np.ndarray, output: str, force: bool) -> None:
    """``scipy.sparse.save_npz`` of :func:`to_csr` (row/column i = store row ``rows[i]``,
    also saved beside it: :func:`graph_outputs`), atomically."""
    from scipy.sparse import save_npz

    from pairkit.core.atomic import atomic_open, check_output

    target, ids_file = (Path(check_output(p, force)) for p in graph_outputs(output))
    csr = to_csr(graph)
    with atomic_open(target, "wb") as fh:
        save_npz(fh, csr)
    with atomic_open(ids_file, "wb") as fh:
        np.save(fh, np.asarray(rows, dtype=np.int64))


def summary_line(s: dict[str, Any]) -> str:
    """The one line ``pairkit issues`` prints on stderr."""
    found = ", ".join(f"{s[c]} {c.replace('-', ' ')}s" for c in ("outlier", "label-error")
                      if c in s)
    cut = (f": --k {s['k_asked']} cut to the {s['k']} other sources"
           if s.get("k_asked") and s["k_asked"] > s["k"] else "")
    return f"{found} among {s['sources']} sources (k = {s['k']}{cut}), {s['seconds']:.1f} s"
