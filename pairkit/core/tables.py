"""Reading and writing tables (pair tables, item lists, dedup groups).

The file type comes from the extension: ``.parquet``, ``.csv``, ``.jsonl``
(or ``.ndjson``/``.json``). ``-`` means JSON Lines on stdin/stdout.
Writes are atomic and refuse to overwrite without ``force``.
"""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pairkit.core.atomic import atomic_path, check_output
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    import pandas as pd

TABLE_SUFFIXES = (".parquet", ".csv", ".jsonl", ".ndjson", ".json")
# pairkit's widest table (an n-tuple with 1,000 negatives) has ~3,000 columns; a header
# beyond these caps is refused before pandas spends minutes and gigabytes parsing it
MAX_COLUMNS = 10_000
MAX_HEADER_BYTES = 1 << 20


def table_kind(path: str | Path) -> str:
    """Return ``parquet``, ``csv`` or ``jsonl`` for a path (``-`` is ``jsonl``)."""
    if str(path) == "-":
        return "jsonl"
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    raise PairkitError(
        f"can't tell the table format of {path}: use one of {', '.join(TABLE_SUFFIXES)} or -"
    )


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a table from a file or ``-`` (JSON Lines on stdin)."""
    import pandas as pd

    kind = table_kind(path)
    try:
        if str(path) == "-":
            text = sys.stdin.read()
            if not text.strip():
                raise PairkitError("no table on stdin (expected JSON Lines)")
            return pd.read_json(io.StringIO(text), lines=True)
        p = Path(path)
        if not p.is_file():
            raise PairkitError(f"table {p} not found")
        if kind == "parquet":
            _check_parquet_columns(p)
            return pd.read_parquet(p)
        if kind == "csv":
            _check_csv_header(p)
            return pd.read_csv(p, keep_default_na=False, na_values=[""])
        if p.stat().st_size == 0:
            raise PairkitError(f"table {p} is empty")
        return pd.read_json(p, lines=True)
    except PairkitError:
        raise
    except Exception as exc:  # pandas/pyarrow raise many types for malformed files
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PairkitError(f"can't read table {path}: {first}") from exc


def _check_csv_header(path: Path) -> None:
    """Refuse a CSV whose header line is over MAX_HEADER_BYTES or MAX_COLUMNS columns."""
    with open(path, "rb") as fh:
        header = fh.readline(MAX_HEADER_BYTES + 1)
    if len(header) > MAX_HEADER_BYTES and not header.endswith(b"\n"):
        raise PairkitError(f"table {path}: the CSV header is longer than "
                           f"{MAX_HEADER_BYTES:,} bytes: not a pairkit table")
    columns = header.count(b",") + 1
    if columns > MAX_COLUMNS:
        raise PairkitError(f"table {path}: the CSV header has {columns:,} columns, more than "
                           f"{MAX_COLUMNS:,}: not a pairkit table")


def _check_parquet_columns(path: Path) -> None:
    import pyarrow.parquet as pq

    columns = pq.ParquetFile(path).metadata.num_columns
    if columns > MAX_COLUMNS:
        raise PairkitError(f"table {path} has {columns:,} columns, more than {MAX_COLUMNS:,}: "
                           "not a pairkit table")


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        f = float(value)
        return None if math.isnan(f) else f
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def iter_jsonl(df: pd.DataFrame) -> Any:
    """Yield one JSON line (without newline) per row; NaN becomes null."""
    columns = list(df.columns)
    for row in df.itertuples(index=False, name=None):
        record = {}
        for key, value in zip(columns, row, strict=True):
            if isinstance(value, float) and math.isnan(value):
                value = None
            record[key] = value
        yield json.dumps(record, default=_json_default, ensure_ascii=False)


def write_jsonl_stream(df: pd.DataFrame, stream: Any) -> None:
    """Write a table as JSON Lines to an open text stream."""
    for line in iter_jsonl(df):
        stream.write(line + "\n")


def write_table(df: pd.DataFrame, path: str | Path, force: bool = False) -> None:
    """Write a table atomically to ``path`` (``-``: JSON Lines on stdout)."""
    kind = table_kind(path)
    if str(path) == "-":
        write_jsonl_stream(df, sys.stdout)
        sys.stdout.flush()
        return
    target = check_output(path, force)
    with atomic_path(target) as tmp:
        if kind == "parquet":
            df.to_parquet(tmp, index=False)
        elif kind == "csv":
            df.to_csv(tmp, index=False)
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                write_jsonl_stream(df, fh)
