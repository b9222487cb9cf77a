"""Reading and writing tables (pair tables, item lists, dedup groups).

The file type comes from the extension: ``.parquet``, ``.csv``, ``.jsonl`` (or
``.ndjson``/``.json``). ``-`` means JSON Lines on stdout; on stdin a table of any of the
three formats, told by its content (:func:`read_stdin`). A folder (a path ending in
``/``, or an existing folder) is a parquet dataset, read as one table: its parts are its
``.parquet`` files whose names start with neither ``.`` nor ``_``
(:func:`is_part_name`), in name order with numbers compared as numbers
(:func:`part_order`): ``part-00000.parquet`` ... as ``mine`` writes them (one block of
anchors per file), and what Spark (``part-00000-UUID-c000.snappy.parquet``), pyarrow
(``part-0.parquet``) or Ray Data (``HEX_000000_000000.parquet``) write. A folder holding
``manifest.json`` is a store, never a table.
Writes are atomic (a folder too: written beside, then renamed) and refuse to overwrite
without ``force``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pairkit.core.atomic import (
    atomic_path,
    check_output,
    remove_stale_output_temps,
    scratch_folder,
    swap_folder,
)
from pairkit.core.remote import check_local, is_url
from pairkit.errors import PairkitError, UsageError

if TYPE_CHECKING:
    import pandas as pd

TABLE_SUFFIXES = (".parquet", ".csv", ".jsonl", ".ndjson", ".json")
# pairkit's widest table (an n-tuple with 1,000 negatives) has ~3,000 columns; a header
# beyond these caps is refused before pandas spends minutes and gigabytes parsing it
MAX_COLUMNS = 10_000
MAX_HEADER_BYTES = 1 << 20
# JSON Lines are read line by line: a line is at most this long (a 1,000-negative n-tuple
# row is ~200 kB), and parsed JSONL_CHUNK_ROWS lines at a time
MAX_LINE_BYTES = 16 << 20
JSONL_CHUNK_ROWS = 65536


# columns that hold text in pairkit's tables (item lists, labels files, pair tables' names):
# CSV and JSON Lines keep them as written ("01" is not "1", "007" not 7.0)
TEXT_COLUMNS = frozenset({"path", "source", "label", "file_sha256", "store_id", "query",
                          "anchor", "positive"})  # the last two: a pairs:FILE relation
TEXT_SUFFIXES = ("_path", "_source", "_label")


PART_PATTERN = "part-{:05d}.parquet"
# the parts pairkit writes (with the writer's token on object storage: core/remote_parts.py);
# only a folder of these is replaced by a write. Any dataset's parts are read: is_part_name
PART_RE = re.compile(r"^part-\d{5,}(?:-[0-9a-f]{8})?\.parquet$")
STORE_MANIFEST = "manifest.json"  # a folder holding it is a store (core/manifest.py)


def named_store_ids(values: Any) -> set[str]:
    """The store ids that a pair table's ``store_id`` cells name, as text. A null, NaN or
    blank cell names none: a blanked column is null read back from CSV but ``""`` from JSON
    Lines or parquet, and is no store's id in any of them."""
    return {str(v) for v in values if v is not None and v == v and str(v).strip()}


def is_part_name(name: str) -> bool:
    """True for a file name that is a part of a parquet dataset folder: ``*.parquet``, not
    starting with ``.`` or ``_`` (hidden and metadata files by Spark's and Hive's rule,
    and pairkit's temp files ``.NAME.XXXXXXXX.tmp``)."""
    return (name.lower().endswith(".parquet") and not name.startswith((".", "_"))
            and "/" not in name and os.sep not in name)


def part_order(name: str) -> tuple[str | int, ...]:
    """Sort key of a part name: its name with each run of digits compared as a number, so
    ``part-10`` follows ``part-9`` and ``part-100000`` follows ``part-99999``."""
    return tuple(int(t) if i % 2 else t for i, t in enumerate(re.split(r"(\d+)", name)))


def is_dataset(path: str | Path) -> bool:
    """True for a parquet dataset folder: a path ending in ``/`` or an existing folder (or
    an object prefix, on object storage)."""
    text = str(path)
    if is_url(path):
        from pairkit.core.remote_tables import is_remote_dataset

        return is_remote_dataset(text)
    return text != "-" and (text.endswith(("/", os.sep)) or Path(text).is_dir())


def reader_gone(write: Callable[[], None]) -> bool:
    """Run ``write`` (a table or lines to ``-``); True when the reader of stdout went away
    before it was done (``| head``: not an error, the command's summary still counts)."""
    try:
        write()
    except BrokenPipeError:
        return True
    return False


def table_kind(path: str | Path) -> str:
    """Return ``parquet``, ``csv``, ``jsonl`` or ``dataset`` (a folder of parquet parts)
    for a path (``-`` is ``jsonl``); UsageError for a name of no table format, PairkitError
    when looking a URL up fails (a failure, not usage)."""
    if str(path) == "-":
        return "jsonl"
    if is_dataset(path):
        return "dataset"
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    raise UsageError(
        f"can't tell the table format of {path}: use one of {', '.join(TABLE_SUFFIXES)}, a "
        "folder ending in / (parquet parts) or -"
    )


def read_table(path: str | Path,
               first_row: Callable[[dict[str, Any]], None] | None = None) -> pd.DataFrame:
    """Read a table from a file, a URL (object storage) or ``-`` (stdin:
    :func:`read_stdin`).
    ``first_row`` gets the first row as a dict before the rest is read, so a cheap check
    (a store id) can refuse a large table early. JSON Lines are streamed with a bound: no
    line over MAX_LINE_BYTES, no row over MAX_COLUMNS keys."""

    kind = table_kind(path)
    try:
        if is_url(path):
            from pairkit.core.remote_tables import read_remote_table

            return read_remote_table(str(path), kind)
        if str(path) == "-":
            return read_stdin(first_row)
        check_local(path, "table")
        p = Path(path)
        if kind == "dataset":
            if first_row is not None:
                _first_parquet_row(dataset_parts(p)[0], first_row)
            return _read_dataset(p)
        if not p.is_file():
            raise PairkitError(f"table {p} not found")
        if kind == "parquet":
            with open(p, "rb") as fh:
                check_parquet_columns(fh, p)
            if first_row is not None:
                _first_parquet_row(p, first_row)
            return read_parquet_frame(p)
        if kind == "csv":
            with open(p, "rb") as fh:
                check_csv_header(fh, p)
            if first_row is not None:
                head = read_csv_frame(p, nrows=1)
                if len(head):
                    first_row(_row_dict(head))
            return read_csv_frame(p)
        with open(p, "rb") as fh:
            table = read_jsonl(fh, str(p), first_row)
        if table is None:
            raise PairkitError(f"table {p} is empty")
        return table
    except PairkitError:
        raise
    except Exception as exc:  # pandas/pyarrow raise many types for malformed files
        raise unreadable(path, exc) from exc


def read_stdin(first_row: Callable[[dict[str, Any]], None] | None = None,
               stream: IO[bytes] | None = None) -> pd.DataFrame:
    """The table on stdin (or in ``stream``, bytes read from it already), its format told
    by its content: parquet (its magic bytes ``PAR1``, read whole: its footer is at the
    end), JSON Lines (a ``{`` or ``[`` first, streamed as a file is) or else CSV (read
    whole)."""
    from pairkit.core.remote_tables import parse_table

    if stream is None:
        stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes underneath (tests)
        stream = io.BytesIO(sys.stdin.read().encode("utf-8"))
    if not hasattr(stream, "peek"):
        stream = io.BufferedReader(stream)
    head = stream.peek(4)
    start = head[3:] if head.startswith(b"\xef\xbb\xbf") else head  # a byte order mark
    if head.startswith(b"PAR1"):
        kind = "parquet"
    elif start.strip() and start.lstrip()[:1] not in (b"{", b"["):
        kind = "csv"
    else:
        table = read_jsonl(stream, "stdin", first_row)
        if table is None:
            raise PairkitError("no table on stdin (expected JSON Lines, CSV or parquet)")
        return table
    data = stream.read()
    try:
        table = parse_table(data, kind, f"stdin ({kind})")
    except PairkitError:
        raise
    except Exception as exc:  # pandas/pyarrow raise many types for malformed input
        raise unreadable(f"stdin ({kind})", exc) from exc
    if first_row is not None and len(table):
        first_row(_row_dict(table))
    return table


def unreadable(what: Any, exc: BaseException) -> PairkitError:
    """``can't read table WHAT: ...`` with the first line of ``exc`` (pandas and pyarrow
    raise many types for a malformed file)."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return PairkitError(f"can't read table {what}: {first}")


def is_text_column(name: Any) -> bool:
    """True for a column pairkit reads as text (:data:`TEXT_COLUMNS`, ``*_path`` ...)."""
    return isinstance(name, str) and (name in TEXT_COLUMNS or name.endswith(TEXT_SUFFIXES))


def read_csv_frame(source: str | Path | IO[bytes], nrows: int | None = None) -> pd.DataFrame:
    """A CSV file (a path or a seekable binary stream): an empty cell is missing, the text
    columns (:func:`is_text_column`) are read as strings, the others typed by pandas."""
    import pandas as pd

    options: dict[str, Any] = {"keep_default_na": False, "na_values": [""]}
    header = pd.read_csv(source, nrows=0, **options)
    if hasattr(source, "seek"):  # a stream: read again from its start
        source.seek(0)
    text = {c: str for c in header.columns if is_text_column(c)}
    return pd.read_csv(source, nrows=nrows, dtype=text or None, **options)


def read_jsonl_frame(data: bytes) -> pd.DataFrame:
    """JSON Lines: each column as its JSON values have it (no guessing from strings), and
    the text columns (:func:`is_text_column`) as strings: a JSON number there is its own
    text (``3``, not ``3.0`` where a null made pandas hold the column as floats, and every
    digit of an integer above 2**53, which a float would round)."""
    import pandas as pd

    frame = pd.read_json(io.BytesIO(data), lines=True, dtype=False)
    lossy = [c for c in frame.columns
             if is_text_column(c) and pd.api.types.is_float_dtype(frame[c])]
    if lossy:  # numbers (and nulls) that pandas made floats: their values from the JSON
        rows = [json.loads(line) for line in data.split(b"\n") if line.strip()]
        if len(rows) == len(frame):
            for col in lossy:
                frame[col] = pd.Series([_as_text(r.get(col)) for r in rows],
                                       index=frame.index, dtype=object)
    return text_columns_as_text(frame)


def read_parquet_frame(source: str | Path | IO[bytes]) -> pd.DataFrame:
    """A parquet file (a path or a binary stream) with its text columns
    (:func:`is_text_column`) as strings, as CSV and JSON Lines give them: integer labels
    with a missing one are "1", not the "1.0" of the float column pandas makes of them
    (integer text columns are made strings by pyarrow, so no digit is lost above 2**53)."""
    import pyarrow.parquet as pq

    return arrow_frame(pq.read_table(source))


def arrow_frame(table: Any) -> pd.DataFrame:
    """A pyarrow table (read from parquet) as :func:`read_parquet_frame` gives it: the text
    columns as strings."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if is_text_column(field.name) and pa.types.is_integer(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(pa.string()))
    return text_columns_as_text(table.to_pandas())


def text_columns_as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each text column (:func:`is_text_column`) that holds other values
    than strings made strings (a number is its own text, a whole float without its
    ``.0``, bytes (a parquet binary column) their UTF-8 text; missing stays missing).
    PairkitError for bytes that are not UTF-8 and for lists or objects (a JSON array),
    which are no text: their Python repr would become a path or a label."""
    import pandas as pd

    for col in frame.columns:
        if not is_text_column(col) or pd.api.types.is_string_dtype(frame[col]):
            continue  # strings (and missing values) already
        values = frame[col].to_numpy(dtype=object)
        try:
            text = [_as_text(v) for v in values]
        except UnicodeDecodeError:
            raise PairkitError(f"table column {col!a} holds bytes that are not UTF-8 "
                               "text") from None
        except TypeError as exc:
            raise PairkitError(f"table column {col!a} holds {exc}, not text") from None
        frame[col] = pd.Series(text, index=frame.index, dtype=object)
    return frame


def _as_text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if hasattr(value, "__len__"):  # a list, an object, a parquet list cell (an array)
        raise TypeError("objects" if isinstance(value, dict) else "lists")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _row_dict(frame: pd.DataFrame) -> dict[str, Any]:
    import numpy as np

    row = frame.iloc[0].to_dict()
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}


def _first_parquet_row(path: Path, first_row: Callable[[dict[str, Any]], None]) -> None:
    import pyarrow.parquet as pq

    batch = next(pq.ParquetFile(path).iter_batches(batch_size=1), None)
    if batch is not None and batch.num_rows:
        first_row(batch.to_pylist()[0])


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, str):
        return "a JSON string"
    if isinstance(value, bool):
        return f"JSON {str(value).lower()}"
    if isinstance(value, int | float):
        return "a JSON number"
    return "JSON null"


def read_jsonl(stream: IO[bytes], name: str,
               first_row: Callable[[dict[str, Any]], None] | None = None
               ) -> pd.DataFrame | None:
    """JSON Lines from a binary stream, JSONL_CHUNK_ROWS lines per pandas parse; None when
    it holds no row. Refuses a line over MAX_LINE_BYTES, with over MAX_COLUMNS keys or that
    is no JSON object (an array, a number ...) as soon as it is read."""
    import pandas as pd

    frames: list[pd.DataFrame] = []
    chunk: list[bytes] = []
    numbers: list[int] = []  # the chunk's line numbers, to name a line pandas can't parse
    number = 0
    first = True
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            break
        number += 1
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]  # a UTF-8 byte order mark (Windows tools), as CSV reads it
        if len(line) > MAX_LINE_BYTES:
            raise PairkitError(f"table {name} line {number} is longer than "
                               f"{MAX_LINE_BYTES:,} bytes: not a pairkit table")
        if not line.strip():
            continue
        # a row has at most as many keys as colons; parse only when that could be too many,
        # or when the line is no JSON object (pandas reads an array as a row of its items)
        if first or not line.lstrip().startswith(b"{") or line.count(b":") > MAX_COLUMNS:
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise PairkitError(f"can't read table {name}: line {number} is not JSON "
                                   f"({exc})") from None
            if not isinstance(record, dict):
                raise PairkitError(f"table {name} line {number} is {_json_kind(record)}, not "
                                   "one JSON object per line (JSON Lines)")
            if len(record) > MAX_COLUMNS:
                raise PairkitError(f"table {name} line {number} has {len(record):,} keys, "
                                   f"more than {MAX_COLUMNS:,}: not a pairkit table")
            if first and first_row is not None:
                first_row(record)
            first = False
        chunk.append(line if line.endswith(b"\n") else line + b"\n")
        numbers.append(number)
        if len(chunk) >= JSONL_CHUNK_ROWS:
            frames.append(_jsonl_chunk(chunk, numbers, name))
            chunk, numbers = [], []
    if chunk:
        frames.append(_jsonl_chunk(chunk, numbers, name))
    if not frames:
        return None
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def _jsonl_chunk(chunk: list[bytes], numbers: list[int], name: str) -> pd.DataFrame:
    """:func:`read_jsonl_frame` of ``chunk``; a line it can't parse (a row cut short by a
    writer that stopped) is named by its number, as the first line is, not by pandas'
    offset inside the chunk."""
    try:
        return read_jsonl_frame(b"".join(chunk))
    except ValueError:
        for line, number in zip(chunk, numbers, strict=True):
            try:
                json.loads(line.strip())  # the newline added to a cut row
            except ValueError as exc:
                raise PairkitError(f"can't read table {name}: line {number} is not JSON "
                                   f"({exc})") from None
        raise


def dataset_parts(folder: Path) -> list[Path]:
    """The parts of a dataset folder (:func:`is_part_name`) in :func:`part_order`;
    PairkitError when the folder is missing, is a store or holds none."""
    if not folder.is_dir():
        raise PairkitError(f"table {folder} not found")
    if (folder / STORE_MANIFEST).exists():
        raise PairkitError(f"table folder {folder} is a store (it holds {STORE_MANIFEST}), "
                           "not a table")
    parts = sorted((e for e in folder.iterdir() if is_part_name(e.name) and e.is_file()),
                   key=lambda e: part_order(e.name))
    if not parts:
        raise PairkitError(f"table folder {folder} holds no .parquet files (parts: *.parquet "
                           "not starting with . or _)")
    return parts


def _read_dataset(folder: Path) -> pd.DataFrame:
    import pandas as pd

    frames = []
    parts = dataset_parts(folder)
    for part in parts:
        with open(part, "rb") as fh:
            check_parquet_columns(fh, part)
        frames.append(read_parquet_frame(part))
    columns = list(frames[0].columns)
    for part, frame in zip(parts, frames, strict=True):
        if list(frame.columns) != columns:
            raise PairkitError(f"table folder {folder}: {part.name} has other columns than "
                               f"{parts[0].name}")
    return pd.concat(frames, ignore_index=True)


def check_csv_header(fh: Any, path: Any) -> None:
    """Refuse a CSV (open binary file ``fh``) whose header line is over MAX_HEADER_BYTES
    or MAX_COLUMNS columns."""
    header = fh.readline(MAX_HEADER_BYTES + 1)
    if len(header) > MAX_HEADER_BYTES and not header.endswith(b"\n"):
        raise PairkitError(f"table {path}: the CSV header is longer than "
                           f"{MAX_HEADER_BYTES:,} bytes: not a pairkit table")
    columns = header.count(b",") + 1
    if columns > MAX_COLUMNS:
        raise PairkitError(f"table {path}: the CSV header has {columns:,} columns, more than "
                           f"{MAX_COLUMNS:,}: not a pairkit table")


def check_parquet_columns(fh: Any, path: Any) -> None:
    """Refuse a parquet file (open binary file ``fh``) of over MAX_COLUMNS columns."""
    import pyarrow.parquet as pq

    columns = pq.ParquetFile(fh).metadata.num_columns
    if columns > MAX_COLUMNS:
        raise PairkitError(f"table {path} has {columns:,} columns, more than {MAX_COLUMNS:,}: "
                           "not a pairkit table")


def _json_default(value: Any) -> Any:
    import numpy as np
    import pandas as pd

    if value is pd.NA or value is pd.NaT:  # a missing value of a pandas column
        return None
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
    """Yield one JSON line (without newline) per row; NaN and pandas' missing values
    become null."""
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


def check_table_name(path: str | Path) -> None:
    """UsageError for an existing local folder named like a table file (``out.csv``, given
    without a trailing ``/``): a table folder holds parquet parts, which the name denies (a
    folder named ``.parquet`` is a parquet dataset, Spark's habit)."""
    text = str(path)
    suffix = Path(text).suffix.lower()
    if text == "-" or is_url(path) or text.endswith(("/", os.sep)) or suffix == ".parquet" \
            or suffix not in TABLE_SUFFIXES or not Path(text).is_dir():
        return
    raise UsageError(f"-o {text} is a folder, but a {suffix} table is one file: remove the "
                     "folder, or end the name with / for parquet parts in it")


def check_table_output(path: str | Path, force: bool) -> Path:
    """:func:`~pairkit.core.atomic.check_output` for a table path, a dataset folder too:
    an existing folder is replaced only with ``force`` and only when it holds nothing but
    parquet parts. A URL: :func:`pairkit.core.remote_tables.check_remote_output`."""
    if is_url(path):
        from pairkit.core.remote_tables import check_remote_output

        return check_remote_output(str(path), force)  # type: ignore[return-value]
    check_table_name(path)
    if not is_dataset(path):
        return check_output(path, force)
    p = Path(str(path).rstrip("/" + os.sep) or str(path))
    if p.exists() and not p.is_dir():
        raise PairkitError(f"output {p} is an existing file, expected a table folder")
    if p.is_dir():
        others = [e.name for e in p.iterdir() if not PART_RE.match(e.name)]
        if others:
            raise PairkitError(f"output {p} is a folder that holds other files ({others[0]}):"
                               " choose another path")
        if any(p.iterdir()) and not force:
            raise PairkitError(f"output {p} exists; pass --force to overwrite it")
    remove_stale_output_temps(p)  # killed writers' folders of parts of this output
    return p


def write_table(df: pd.DataFrame, path: str | Path, force: bool = False,
                part_rows: list[int] | None = None) -> None:
    """Write a table atomically to ``path`` (``-``: JSON Lines on stdout; a folder: a
    parquet dataset, one part per entry of ``part_rows`` (row counts; default one part))."""
    kind = table_kind(path)
    if is_url(path):
        from pairkit.core.remote_tables import write_remote_table

        write_remote_table(df, str(path), kind, force, part_rows)
        return
    if str(path) == "-":
        write_jsonl_stream(df, sys.stdout)
        sys.stdout.flush()
        return
    if kind == "dataset":
        _write_dataset(df, check_table_output(path, force), part_rows or [len(df)])
        return
    target = check_output(path, force)
    with atomic_path(target, replace=force) as tmp:
        if kind == "parquet":
            df.to_parquet(tmp, index=False)
        elif kind == "csv":
            df.to_csv(tmp, index=False, quoting=csv_quoting(df))
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                write_jsonl_stream(df, fh)


def csv_quoting(df: pd.DataFrame) -> int:
    """csv.QUOTE_MINIMAL, or QUOTE_NONNUMERIC when a text cell holds a carriage return:
    the writer ends lines with \n and doesn't quote a bare \r, which readers take for a
    line end (a file named ``a\r.png`` split its row in two)."""
    import csv

    for name in df.columns:
        column = df[name]
        if column.dtype == object or str(column.dtype).startswith("str"):
            with contextlib.suppress(AttributeError, TypeError):  # not text after all
                if bool(column.str.contains("\r", regex=False, na=False).any()):
                    return csv.QUOTE_NONNUMERIC
    return csv.QUOTE_MINIMAL


def _write_dataset(df: pd.DataFrame, target: Path, part_rows: list[int]) -> None:
    """Write the parts into a new folder beside ``target``, then put it in its place (an
    old folder of parts is renamed away first and removed after)."""
    if sum(part_rows) != len(df):
        raise PairkitError(f"internal: parts of {sum(part_rows)} rows for {len(df)} rows")
    target.parent.mkdir(parents=True, exist_ok=True)
    with scratch_folder(target) as tmp:
        start = 0
        for i, rows in enumerate(r for r in part_rows if r > 0 or len(df) == 0):
            part = df.iloc[start:start + rows]
            with atomic_path(tmp / PART_PATTERN.format(i)) as f:
                part.to_parquet(f, index=False)
            start += rows
        commit_dataset_folder(tmp, target)


def commit_dataset_folder(tmp: Path, target: Path) -> None:
    """Put the folder of parts ``tmp`` (beside ``target``) in place of ``target``: an old
    folder of parts is renamed away first and removed after (:func:`swap_folder`)."""
    os.chmod(tmp, 0o755)
    swap_folder(tmp, target)
