"""The metrics table ``pairkit eval`` prints on stderr (rich), one column per run."""

from __future__ import annotations

from typing import Any

ROWS = (
    ("knn_top1", "kNN top-1 (first k)"),
    ("knn_top5", "kNN top-5 (first k)"),
    ("knn_mean_per_class_recall", "kNN mean per-class recall (first k)"),
    ("linear_top1", "linear probe top-1"),
    ("linear_mean_per_class_recall", "linear probe mean per-class recall"),
    ("precision_at_1", "precision@1"),
    ("r_precision", "R-precision"),
    ("map_at_r", "MAP@R"),
    ("alignment", "alignment (alpha=2, lower is better)"),
    ("uniformity", "uniformity (t=2, lower is better)"),
    ("n_queries", "queries"),
    ("n_references", "references"),
    ("n_gallery", "retrieval gallery (the queries)"),
)
SCORE_ROWS = (
    ("positive", "score: positive pairs, mean +- sd"),
    ("mined_negative", "score: mined negatives, mean +- sd"),
    ("random_negative", "score: random negatives, mean +- sd"),
)


def fmt(value: Any) -> str:
    """``-`` for None, integers as they are, floats with 4 decimals."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.4f}"


def table_rows(results: dict[str, dict[str, Any]], reports: dict[str, Any]
               ) -> list[tuple[str, list[str]]]:
    """``(title, one cell per run)`` for every metric some run has, in display order."""
    first = next(iter(results.values()))
    rows: list[tuple[str, list[str]]] = []
    for key, title in ROWS:
        if any(key in r for r in results.values()):
            rows.append((title, [fmt(r.get(key)) for r in results.values()]))
        if key == "knn_mean_per_class_recall":  # then each k's top-1 / top-5
            for k in first.get("knn", {}):
                rows.append((f"kNN k={k} top-1 / top-5",
                             [f"{fmt(r.get('knn', {}).get(k, {}).get('top1'))} / "
                              f"{fmt(r.get('knn', {}).get(k, {}).get('top5'))}"
                              for r in results.values()]))
        if key == "map_at_r":
            for k in first.get("recall_at_k", {}):
                rows.append((f"recall@{k}", [fmt(r.get("recall_at_k", {}).get(k))
                                             for r in results.values()]))
    for kind, title in SCORE_ROWS:
        cells = []
        for report in reports.values():
            v = report.scores.get(kind)
            cells.append(f"{v.mean():.3f} +- {v.std():.3f}" if v is not None and len(v) else "-")
        if any(c != "-" for c in cells):
            rows.append((title, cells))
    return rows


def metrics_table(results: dict[str, dict[str, Any]], reports: dict[str, Any]) -> Any:
    """A rich Table (no title: the command line above it says what it is)."""
    from rich.table import Table

    table = Table()
    table.add_column("metric")
    for name in results:
        table.add_column(name, justify="right")
    for title, values in table_rows(results, reports):
        table.add_row(title, *values)
    return table
