"""Hugging Face ``datasets`` input: a dataset saved with ``save_to_disk`` (a ``Dataset`` or a
``DatasetDict`` folder of Arrow files) or parquet / Arrow files with an image column.

Read with pyarrow alone (``datasets`` itself is not needed to embed). The image column
holds image bytes (HF's ``Image`` feature: a struct of bytes and path, or plain binary)
or paths to image files (text, or the struct with null bytes); the label column (a
``ClassLabel``, whose names are used, or any scalar) is optional.

Store paths: an image held as bytes is ``DATA_FILE/ROW`` (the data file's path relative
to the image root, then the row number in that file, zero-padded to 8 digits so that
path order is row order): ``train/data-00000-of-00001.arrow/00000012``. An image held
as a path is that file's path relative to the image root, as ``embed`` of a folder
gives. The image root is the dataset's folder (the common folder of the data files and
of any image files they name). :func:`read_row_bytes` reads one row's bytes back, in
any process (an Arrow file is memory-mapped once per process; a parquet file is read one
row group at a time).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pairkit.encode.images import DecodeError, ImageFile, name_problem
from pairkit.errors import PairkitError, UsageError

DATA_SUFFIXES = (".arrow", ".parquet")
SAVED_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
ROW_DIGITS = 8
IMAGE_NAMES = ("image", "img", "picture", "photo")


def is_hf_dataset(spec: str | os.PathLike[str]) -> bool:
    """True for a ``save_to_disk`` folder (a marker file and Arrow files: a folder of images
    with a stray ``dataset_info.json`` is a folder) or a .parquet / .arrow file."""
    p = Path(spec)
    if p.is_dir():
        if not any((p / m).is_file() for m in SAVED_MARKERS):
            return False
        try:
            if (p / "dataset_dict.json").is_file() and any(p.glob("*/*.arrow")):
                return True  # a DatasetDict: one folder of Arrow files per split
            return any(p.glob("*.arrow"))
        except OSError:
            return False
    return p.suffix.lower() in DATA_SUFFIXES


def data_files(spec: Path) -> list[Path]:
    """The Arrow / parquet files of a dataset: the file itself, or those a ``save_to_disk``
    folder names (``state.json``; a ``DatasetDict`` lists its splits in
    ``dataset_dict.json``)."""
    if spec.is_file():
        return [spec]
    if not spec.exists():
        raise PairkitError(f"dataset {spec} not found")
    if (spec / "dataset_dict.json").is_file():
        try:
            splits = json.loads((spec / "dataset_dict.json").read_text())["splits"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PairkitError(f"dataset {spec}: dataset_dict.json is unreadable ({exc})") \
                from None
        return [f for s in splits for f in data_files(spec / str(s))]
    state = spec / "state.json"
    try:
        names = [d["filename"] for d in json.loads(state.read_text())["_data_files"]]
    except FileNotFoundError:
        names = sorted(p.name for p in spec.glob("*.arrow"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PairkitError(f"dataset {spec}: state.json is unreadable ({exc})") from None
    files = []
    for name in names:
        f = spec / str(name)
        if Path(name).is_absolute() or ".." in Path(name).parts or not f.is_file():
            raise PairkitError(f"dataset {spec}: data file {name!a} is missing or outside it")
        files.append(f)
    if not files:
        raise PairkitError(f"dataset {spec} has no data files")
    return files


@lru_cache(maxsize=8)
def _arrow_table(path: str) -> Any:
    import pyarrow as pa

    source = pa.memory_map(path)
    try:
        return pa.ipc.open_stream(source).read_all()
    except pa.ArrowInvalid:
        return pa.ipc.open_file(source).read_all()


def _schema(path: Path) -> Any:
    import pyarrow.parquet as pq

    if path.suffix.lower() == ".parquet":
        return pq.ParquetFile(path).schema_arrow
    return _arrow_table(str(path)).schema


def features(schema: Any) -> dict[str, Any]:
    """The HF feature types of a schema (``huggingface`` metadata), {} when absent."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if not raw:
        return {}
    try:
        return dict(json.loads(raw)["info"]["features"])
    except (ValueError, KeyError, TypeError):
        return {}


def pick_image_column(schema: Any, feats: dict[str, Any], asked: str | None) -> str:
    """``asked``, else the first column of HF type Image, else one named image/img/...,
    else the only binary column."""
    import pyarrow as pa

    names = list(schema.names)
    if asked is not None:
        if asked not in names:
            raise UsageError(f"--image-column {asked}: no such column (columns: "
                             f"{', '.join(names)})")
        return asked
    typed = [n for n in names if isinstance(feats.get(n), dict)
             and feats[n].get("_type") == "Image"]
    if typed:
        return typed[0]
    for n in names:
        if n.lower() in IMAGE_NAMES:
            return n
    binary = [f.name for f in schema if pa.types.is_binary(f.type)
              or pa.types.is_large_binary(f.type)]
    if len(binary) == 1:
        return binary[0]
    raise UsageError(f"no image column found (columns: {', '.join(names)}): name it with "
                     "--image-column")


def _bytes_and_path(value: Any) -> tuple[bytes | None, str | None]:
    if isinstance(value, dict):
        return value.get("bytes"), value.get("path")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), None
    if isinstance(value, str):
        return None, value
    return None, None


def _label_names(feats: dict[str, Any], column: str) -> list[str] | None:
    f = feats.get(column)
    if isinstance(f, dict) and f.get("_type") == "ClassLabel" and isinstance(
            f.get("names"), list):
        return [str(n) for n in f["names"]]
    return None


def _label(value: Any, names: list[str] | None) -> str | None:
    if value is None or isinstance(value, (dict, list, bytes)):
        return None
    if names is not None and isinstance(value, int) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, int) and value < 0:  # ClassLabel's -1: no label
        return None
    return str(value)


def discover_hf_dataset(spec: str | os.PathLike[str], image_column: str | None = None,
                        label_column: str | None = None
                        ) -> tuple[Path, list[ImageFile], list[tuple[str, str]],
                                   dict[str, str | None]]:
    """Every row of a dataset as an image: ``(image root, files sorted by path, problems,
    labels by path)``. ``label_column`` None: ``label`` when the data has one."""
    spec = Path(spec)
    files = data_files(spec)
    base = spec if spec.is_dir() else spec.parent
    rows: list[tuple[Path, str, int, bool, str | None, str | None]] = []
    problems: list[tuple[str, str]] = []
    for data in files:
        try:
            schema = _schema(data)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise unreadable(data, exc) from None
        feats = features(schema)
        col = pick_image_column(schema, feats, image_column)
        lab_col = label_column
        if lab_col is None and "label" in schema.names:
            lab_col = "label"
        if lab_col is not None and lab_col not in schema.names:
            raise UsageError(f"--label-column {lab_col}: no such column in {data}")
        names = _label_names(feats, lab_col) if lab_col else None
        columns = [col] + ([lab_col] if lab_col and lab_col != col else [])
        try:
            for n, record in enumerate(_iter_rows(data, columns)):
                data_bytes, path = _bytes_and_path(record.get(col))
                label = _label(record.get(lab_col), names) if lab_col else None
                rows.append((data, col, n, data_bytes is not None, path, label))
        except (OSError, ValueError) as exc:
            raise unreadable(data, exc) from None
    # the image root holds the data files and every image file a row names
    referenced = []
    for data, _, _, has_bytes, path, _ in rows:
        if not has_bytes and path:
            p = Path(path)
            referenced.append((p if p.is_absolute() else data.parent / p).resolve())
    dirs = [str(base.resolve())] + [str(p.parent) for p in referenced]
    root = Path(os.path.commonpath(dirs))
    out: list[ImageFile] = []
    labels: dict[str, str | None] = {}
    seen: set[str] = set()
    for data, col, n, has_bytes, path, label in rows:
        rel_data = data.resolve().relative_to(root).as_posix()
        if has_bytes:
            name = f"{rel_data}/{n:0{ROW_DIGITS}d}"
            f = ImageFile(name, data.resolve(), row=(n, col))
        elif path:
            p = Path(path)
            p = (p if p.is_absolute() else data.parent / p).resolve()
            name = p.relative_to(root).as_posix()
            if not p.exists():  # never there: not a file that vanished during the run
                problems.append((name, f"the dataset row names {path!a}, which does not "
                                 "exist"))
                continue
            problem = name_problem(name)
            if problem is not None:
                problems.append((name, problem))
                continue
            if name in seen:
                problems.append((f"{rel_data}/{n:0{ROW_DIGITS}d}", f"names {path!a} again: "
                                 "the first row is used"))
                continue
            f = ImageFile(name, p)
        else:
            problems.append((f"{rel_data}/{n:0{ROW_DIGITS}d}", f"no image in column {col}"))
            continue
        seen.add(name)
        out.append(f)
        labels[name] = label
    out.sort(key=lambda f: f.path)
    return root, out, problems, labels


def unreadable(data: Path, exc: BaseException) -> PairkitError:
    """The error for a data file pyarrow can't read (not parquet / Arrow, truncated)."""
    kind = "parquet" if data.suffix.lower() == ".parquet" else "Arrow"
    reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    return PairkitError(f"dataset {data} is not a readable {kind} file ({reason})")


def _iter_rows(data: Path, columns: list[str]) -> Any:
    """The rows of ``columns`` of a data file as dicts (image bytes included: one record
    batch at a time)."""
    import pyarrow.parquet as pq

    if data.suffix.lower() == ".parquet":
        batches = pq.ParquetFile(data).iter_batches(batch_size=1024, columns=columns)
    else:
        batches = _arrow_table(str(data)).select(columns).to_batches(max_chunksize=1024)
    for batch in batches:
        yield from batch.to_pylist()


@lru_cache(maxsize=4)
def _row_groups(path: str) -> tuple[int, ...]:
    """First row of each row group of a parquet file, and the total last."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    starts = [0]
    for i in range(meta.num_row_groups):
        starts.append(starts[-1] + meta.row_group(i).num_rows)
    return tuple(starts)


@lru_cache(maxsize=2)
def _row_group(path: str, group: int, column: str) -> Any:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read_row_group(group, columns=[column]).column(0)


def read_row_bytes(path: Path, row: int, column: str, max_bytes: int) -> bytes:
    """The image bytes of row ``row`` of ``column`` in a data file; DecodeError with the
    reason (too large, empty, unreadable)."""
    import bisect

    try:
        if path.suffix.lower() == ".parquet":
            starts = _row_groups(str(path))
            g = bisect.bisect_right(starts, row) - 1
            if not 0 <= g < len(starts) - 1:
                raise DecodeError(f"row {row} is not in {path.name}")
            value = _row_group(str(path), g, column)[row - starts[g]].as_py()
        else:
            value = _arrow_table(str(path)).column(column)[row].as_py()
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"unreadable dataset row ({type(exc).__name__}: {exc})") from None
    data, _ = _bytes_and_path(value)
    if data is None:
        raise DecodeError("the row holds no image bytes")
    if len(data) > max_bytes:
        raise DecodeError(f"file too large ({len(data):,} bytes > --max-file-bytes "
                          f"{max_bytes:,})")
    if not data:
        raise DecodeError("empty file (0 bytes)")
    return data


def open_row(root: Path, path: str, max_bytes: int,
             image_column: str | None = None) -> bytes | None:
    """The bytes of the store path ``DATA_FILE/ROW`` under ``root``, or None when ``path``
    does not name a dataset row. ``image_column``: the one ``embed --image-column`` named
    (the store's ``embedding.image_column``); None: the default pick."""
    head, _, row = path.rpartition("/")
    if not head or not row.isdigit() or len(row) != ROW_DIGITS:
        return None
    data = root / head
    if data.suffix.lower() not in DATA_SUFFIXES or not data.is_file():
        return None
    schema = _schema(data)
    column = pick_image_column(schema, features(schema), image_column)
    return read_row_bytes(data, int(row), column, max_bytes)
