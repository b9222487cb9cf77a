"""What a report input is: a pair table, dedup groups, an eval result or PNG plots.

A table's kind comes from its columns (docs/formats.md): ``negative_id`` (triplet),
``negative_id_1`` (n-tuple), ``other_id`` + ``label`` (labeled-pair), ``group`` +
``id`` + ``keep`` (dedup groups), ``query`` + ``query_kind`` + ``rank`` + ``id`` (search
results). An eval result is the JSON object ``pairkit eval
--json`` prints (metrics, or ``{"raw": ..., "head": ...}`` with ``--compare``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pairkit.errors import PairkitError

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import pandas as pd

    from pairkit.core.table_items import ReadApart

KINDS = ("pairs", "dedup", "search", "eval", "plots")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# keys of `pairkit eval --json` (docs/eval.md); one of them marks a metrics object
EVAL_KEYS = frozenset({
    "n_queries", "n_references", "knn", "knn_top1", "knn_top5",
    "knn_mean_per_class_recall", "linear_top1",
    "linear_mean_per_class_recall", "linear_probe", "precision_at_1", "r_precision", "map_at_r",
    "recall_at_k", "alignment", "uniformity", "n_gallery",
})
_WHAT = ("pair tables, dedup groups, search results (.parquet/.csv/.jsonl), eval JSON or PNG "
         "plots")


@dataclass
class ReportInput:
    """One input: ``kind`` in :data:`KINDS`; ``fmt`` the pair-table format."""

    kind: str
    name: str  # as given on the command line, for captions
    path: Path | None  # None for stdin
    table: pd.DataFrame | None = None
    fmt: str | None = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # eval: side -> metrics
    plots: list[Path] = field(default_factory=list)
    # a pair table read narrow (pair_source): ``table`` holds the summary's columns only,
    # ``rows`` reads every column of given rows, ``apart`` is what the store check needs
    rows: Callable[[np.ndarray], pd.DataFrame] | None = None
    apart: ReadApart | None = None


# the columns each kind's view reads (pair_format tells the kinds apart by fewer)
NEEDED = {"triplet": ("anchor_id", "positive_id", "negative_id"),
          "n-tuple": ("anchor_id", "positive_id", "negative_id_1"),
          "labeled-pair": ("anchor_id", "other_id", "label"),
          "dedup": ("group", "id", "keep"),
          "search": ("query", "query_kind", "rank", "id", "score")}


def pair_format(columns: list[str]) -> str | None:
    """``triplet``, ``n-tuple``, ``labeled-pair``, ``dedup``, ``search`` or None from column
    names; UsageError for one with both triplet and n-tuple negatives (ambiguous)."""
    from pairkit.core.table_items import check_negative_columns

    check_negative_columns(columns)
    cols = set(map(str, columns))
    if {"query", "query_kind", "rank", "id"} <= cols:
        return "search"
    if {"anchor_id", "negative_id"} <= cols:
        return "triplet"
    if "anchor_id" in cols and "negative_id_1" in cols:
        return "n-tuple"
    if {"anchor_id", "other_id", "label"} <= cols:
        return "labeled-pair"
    if {"group", "id", "keep"} <= cols:
        return "dedup"
    return None


def eval_results(obj: Any) -> dict[str, dict[str, Any]] | None:
    """``{side: metrics}`` of an eval JSON object (``raw``/``head`` or one ``result``)."""
    if not isinstance(obj, dict):
        return None
    if obj and all(isinstance(v, dict) and EVAL_KEYS & set(v) for v in obj.values()):
        return {str(k): v for k, v in obj.items()}
    if EVAL_KEYS & set(obj):
        return {"result": obj}
    return None


def read_input(spec: str) -> ReportInput:
    """Read and classify one input; raise PairkitError naming what it could not use."""
    if spec == "-":
        return _stdin_input()
    from pairkit.core.remote import is_url

    if is_url(spec):  # object storage: tables only (a store is given with --store)
        return _table_input(spec, None)
    path = Path(spec)
    try:
        found = path.exists()
    except OSError as exc:  # inside a folder closed to this user
        raise PairkitError(f"input {spec} is unreadable ({exc.strerror or exc})") from None
    if not found:
        raise PairkitError(f"input {spec} not found")
    if path.is_dir():
        if (path / "manifest.json").is_file():
            raise PairkitError(
                f"{spec} is a store: report reads {_WHAT}; pass the store as --store")
        from pairkit.core.tables import is_part_name

        if any(is_part_name(p.name) and p.is_file() for p in path.iterdir()):
            return _table_input(spec, path)  # a parquet dataset (mine -o DIR/, Spark ...)
        plots = sorted(p for p in path.iterdir() if p.suffix.lower() == ".png" and p.is_file())
        if not plots:
            raise PairkitError(f"folder {spec} holds no PNG plots (report reads {_WHAT})")
        return ReportInput("plots", spec, path, plots=plots)
    suffix = path.suffix.lower()
    if suffix == ".png":
        return ReportInput("plots", spec, path, plots=[path])
    if suffix == ".json":
        obj = _json_object(path)
        results = eval_results(obj)
        if results is not None:
            return ReportInput("eval", spec, path, results=results)
    if suffix not in (".parquet", ".csv", ".jsonl", ".ndjson", ".json"):
        raise PairkitError(f"can't tell what {spec} is: report reads {_WHAT}")
    return _table_input(spec, path)


def _json_object(path: Path) -> Any:
    """The file's single JSON value, or None when it is not one (JSON Lines, say: told
    from its first line, so a large table is not read whole to find out)."""
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline(1 << 20)
            try:
                json.loads(first)
                if fh.read(1 << 16).strip():
                    return None  # a whole JSON value on line 1 and more after: JSON Lines
            except ValueError:
                pass
            fh.seek(0)
            return json.load(fh)
    except (ValueError, UnicodeDecodeError):
        return None
    except OSError as exc:
        raise PairkitError(f"can't read {path}: {exc.strerror or exc}") from None


# the columns of `pairkit dedup`'s table (docs/dedup.md), for one written with no rows
DEDUP_COLUMNS = ("group", "id", "path", "keep", "similarity", "match")


def _rowless_jsonl(path: Path) -> bool:
    """True for a local JSON Lines file that holds no row (0 bytes or blank lines), as
    ``pairkit dedup -o FILE.jsonl`` writes it when there are no duplicates."""
    from pairkit.core.tables import table_kind

    if table_kind(path) != "jsonl":
        return False
    try:
        with open(path, "rb") as fh:
            while block := fh.read(1 << 16):
                if block.strip():
                    return False
    except OSError:
        return False  # read_table names the problem
    return True


def _stdin_input() -> ReportInput:
    """stdin: an eval result (one JSON object, ``pairkit eval --json | pairkit report -``,
    pretty-printed too) or a table. Read whole, as a table on stdin is for the page."""
    import sys

    stream = getattr(sys.stdin, "buffer", None)
    data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
    if data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":
        try:
            results = eval_results(json.loads(data))
        except ValueError:  # JSON Lines: more than one value
            results = None
        if results is not None:
            return ReportInput("eval", "-", None, results=results)
    return _table_input("-", None, data)


def _table_input(spec: str, path: Path | None, data: bytes | None = None) -> ReportInput:
    """A table input; ``data``: stdin's bytes, read already."""
    import io

    import pandas as pd

    from pairkit.core.tables import read_stdin, read_table

    if path is not None and path.is_file() and _rowless_jsonl(path):
        # no row tells no kind; dedup writes "no duplicates" so (where a CSV keeps its
        # header and a parquet its schema): 0 groups, as those
        return ReportInput("dedup", spec, path, table=pd.DataFrame(columns=list(DEDUP_COLUMNS)))
    if path is not None:
        narrow = _narrow_pairs(spec, path)
        if narrow is not None:
            return narrow
    table = read_table(spec) if data is None else read_stdin(stream=io.BytesIO(data))
    fmt = pair_format(list(table.columns))
    if fmt is None:
        cols = ", ".join(map(str, list(table.columns)[:12])) or "none"
        raise PairkitError(
            f"{'stdin' if spec == '-' else spec} is neither a pair table nor dedup groups nor "
            "search results "
            f"(columns: {cols}); report reads {_WHAT}")
    name = "stdin" if spec == "-" else spec
    missing = [c for c in NEEDED[fmt] if c not in table.columns]
    if missing:  # classified by some columns; the views read these too
        raise PairkitError(f"{name}: {fmt} tables need column {', '.join(missing)} "
                           "(docs/formats.md)")
    if fmt in ("dedup", "search"):  # an empty dedup id would index the store's last row
        from pairkit.core.pairs import integer_ids

        # a search table's empty id is a padding row (no hit); 7.5 or 'abc' is refused,
        # with a store or without, as a pair table's (not cut to 7, nor dropped)
        kind = f"{fmt} table"
        integer_ids(table["id"], "id", allow_missing=fmt == "search", table=kind)
        # nor is a group or rank 1.5 cut to 1, nor 'x' or -3 dropped (a group) or shown
        column, numbers = (("group", "groups are 0, 1, ...") if fmt == "dedup" else
                           ("rank", "ranks are 0, 1, ... (0 = nearest)"))
        values = integer_ids(table[column], column, allow_missing=False, table=kind)
        if (values < 0).any():
            row = int((values < 0).argmax())
            raise PairkitError(f"{name}: column {column} holds a negative number, "
                               f"{int(values[row])} (row {row}): {numbers}")
    kind = fmt if fmt in ("dedup", "search") else "pairs"
    return ReportInput(kind, spec, path, table=table, fmt=None if kind == "dedup" else fmt)


def _narrow_pairs(spec: str, path: Path) -> ReportInput | None:
    """A local parquet pair table read narrow (:mod:`pairkit.report.pair_source`); None
    for any other input (read whole)."""
    from pairkit.core.tables import table_kind, unreadable

    if table_kind(path) not in ("parquet", "dataset") or not path.exists():
        return None
    from pairkit.report.pair_source import parquet_columns, parquet_parts, read_narrow
    from pairkit.report.pairs_view import summary_columns

    try:
        parts = parquet_parts(path)
        columns = parquet_columns(parts, path)
        fmt = pair_format(columns)
        if fmt is None or fmt in ("dedup", "search"):
            return None  # read whole, as before (and refused there when it is neither)
        missing = [c for c in NEEDED[fmt] if c not in columns]
        if missing:
            raise PairkitError(f"{spec}: {fmt} tables need column {', '.join(missing)} "
                               "(docs/formats.md)")
        source = read_narrow(parts, columns, summary_columns(columns))
        apart = source.apart(fmt)
    except PairkitError:
        raise
    except Exception as exc:  # pyarrow raises many types for malformed files
        raise unreadable(spec, exc) from exc
    return ReportInput("pairs", spec, path, table=source.narrow, fmt=fmt, rows=source.rows,
                       apart=apart)
