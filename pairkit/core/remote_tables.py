"""Tables on object storage: ``-o s3://bucket/pairs.parquet`` and ``s3://bucket/pairs/``.

A table file is one object, put whole (an object appears complete or not at all). On
s3:// a new table is put with ``If-None-Match: *``, so an existing one is never
overwritten without ``--force``, even by a writer racing this one.

A dataset (a URL ending in ``/``) is written as parts under names that carry this
writer's token (``part-00000-1a2b3c4d.parquet``), then ``_pairkit_parts.json`` naming
every part with its rows, size and sha256: the commit, conditional like a store's
manifest. A reader takes exactly the parts it names (checked); a prefix without one (Spark,
pyarrow, Ray Data) is read as a local folder is (:func:`pairkit.core.tables.is_part_name`,
in :func:`pairkit.core.tables.part_order`), unless its parts carry a pairkit token (a
pairkit write that never committed: refused) or it holds ``manifest.json`` (a store).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from typing import TYPE_CHECKING

from pairkit.core.remote import (
    CommitConflict,
    check_bucket,
    exists,
    is_dir,
    is_file,
    join,
    list_names,
    put,
    put_if,
    read_bytes,
    scheme,
)
from pairkit.core.remote_parts import (
    MAX_PARTS_BYTES,
    PARTS,
    TOKEN_NAME_RE,
    uncommitted_only,
)
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    import pandas as pd

MAX_TABLE_BYTES = 16 << 30
# a part pairkit put under its writer's token (RemoteParts.part_name): one of a write that
# committed only when the parts file names it
TOKEN_PART_RE = re.compile(r"^part-\d{5,}-[0-9a-f]{8}\.parquet$")


def is_remote_dataset(url: str) -> bool:
    """True for a dataset: a URL ending in ``/``, or a name with objects under ``NAME/``.
    PairkitError when an object ``NAME`` and objects under ``NAME/`` both exist: which of
    the two is the table is anybody's guess (other readers take the object, a prefix
    reader the parts), so neither is read nor written."""
    base = url.rstrip("/")
    dataset = url.endswith("/") or is_dir(base)
    if dataset and base.partition("://")[2].strip("/").count("/") and is_file(base):
        if not is_dir(base):  # a trailing / after an object, nothing under it
            raise PairkitError(f"{url}: {base} is an object, not a prefix of table parts: "
                               "drop the trailing / or name another path")
        raise PairkitError(f"{url}: both an object {base} and objects under {base}/ exist: "
                           "remove one of them or name another path")
    return dataset


def check_remote_output(url: str, force: bool) -> str:
    """Refuse an existing table (or dataset) at ``url`` unless ``force``, and one in a
    bucket that does not exist (before the work, not when it is written). A prefix of
    only uncommitted parts (a killed writer's) is no table: the commit removes them. A
    prefix holding other objects (a store, a Spark dataset) is refused, ``force`` or not,
    as a local folder of other files is."""
    from pairkit.core.tables import PART_RE

    check_bucket(url)
    if is_remote_dataset(url):
        names = list_names(url.rstrip("/"))
        others = [n for n in names
                  if n != PARTS and not PART_RE.match(n) and not TOKEN_NAME_RE.match(n)]
        if others:
            raise PairkitError(f"output {url} is a prefix that holds other objects "
                               f"({others[0]}): choose another path")
        if names and not force and not uncommitted_only(names):
            raise PairkitError(f"output {url} exists; pass --force to overwrite it")
        return url
    if exists(url) and not force:
        raise PairkitError(f"output {url} exists; pass --force to overwrite it")
    return url


def frame_bytes(df: pd.DataFrame, kind: str) -> bytes:
    """``df`` as the bytes of a table file of ``kind`` (parquet, csv, jsonl): one object."""
    buf = io.BytesIO()
    if kind == "parquet":
        df.to_parquet(buf, index=False)
    elif kind == "csv":
        from pairkit.core.tables import csv_quoting

        df.to_csv(buf, index=False, quoting=csv_quoting(df))  # as a local file is written
    else:
        from pairkit.core.tables import iter_jsonl

        return "".join(line + "\n" for line in iter_jsonl(df)).encode("utf-8")
    return buf.getvalue()


def write_remote_table(df: pd.DataFrame, url: str, kind: str, force: bool,
                       part_rows: list[int] | None) -> None:
    """Put ``df`` at ``url`` (see the module docstring)."""
    check_remote_output(url, force)
    if kind == "dataset":
        _write_dataset(df, url.rstrip("/"), part_rows or [len(df)], force)
        return
    data = frame_bytes(df, kind)
    if scheme(url) in ("s3", "s3a") and not force:
        try:
            put_if(url, data, None)
        except CommitConflict:
            raise PairkitError(f"output {url} exists (written meanwhile by another "
                               "process); pass --force to overwrite it") from None
    else:
        put(url, data)


def _write_dataset(df: pd.DataFrame, url: str, part_rows: list[int], force: bool) -> None:
    from pairkit.core.remote_parts import start_parts

    if sum(part_rows) != len(df):
        raise PairkitError(f"internal: parts of {sum(part_rows)} rows for {len(df)} rows")
    parts = start_parts(url)
    records, start = [], 0
    try:
        for i, rows in enumerate(r for r in part_rows if r > 0 or len(df) == 0):
            records.append(parts.put_part(i, frame_bytes(df.iloc[start:start + rows],
                                                          "parquet"), rows))
            start += rows
    except BaseException:
        parts.abort()
        raise
    parts.commit(records, force)


def read_remote_table(url: str, kind: str) -> pd.DataFrame:
    """A table from an object (or a dataset prefix), its parts checked."""
    if kind == "dataset":
        return _read_dataset(url.rstrip("/"))
    try:
        data = read_bytes(url, MAX_TABLE_BYTES)
    except FileNotFoundError:
        raise PairkitError(f"table {url} not found") from None
    return parse_table(data, kind, url)


def parse_table(data: bytes, kind: str, name: str) -> pd.DataFrame:
    from pairkit.core.tables import (
        check_csv_header,
        check_parquet_columns,
        read_csv_frame,
        read_jsonl,
        read_parquet_frame,
    )

    if kind == "parquet":
        check_parquet_columns(io.BytesIO(data), name)
        return read_parquet_frame(io.BytesIO(data))
    if kind == "csv":
        check_csv_header(io.BytesIO(data), name)
        return read_csv_frame(io.BytesIO(data))
    table = read_jsonl(io.BytesIO(data), name)
    if table is None:
        raise PairkitError(f"table {name} is empty")
    return table


def _read_dataset(url: str) -> pd.DataFrame:
    import pandas as pd

    from pairkit.core.tables import PART_RE, STORE_MANIFEST, is_part_name, part_order

    try:
        raw = read_bytes(join(url, PARTS), MAX_PARTS_BYTES)
    except FileNotFoundError:
        raw = None
    frames = []
    if raw is not None:
        try:
            parts = json.loads(raw)["parts"]
            if not isinstance(parts, list) or not parts:  # a commit names at least one
                raise ValueError(parts)
            names = [(p["file"], p) for p in parts]
        except (ValueError, KeyError, TypeError):
            raise PairkitError(f"table {url}/: {PARTS} is damaged") from None
    else:
        objects = list_names(url)
        if STORE_MANIFEST in objects:
            raise PairkitError(f"table folder {url}/ is a store (it holds {STORE_MANIFEST}), "
                               "not a table")
        listed = sorted((n for n in objects if is_part_name(n)), key=part_order)
        if not listed:
            raise PairkitError(f"table folder {url}/ holds no .parquet objects (parts: "
                               "*.parquet not starting with . or _)")
        if any(TOKEN_PART_RE.match(n) for n in listed):
            raise PairkitError(f"table folder {url}/ is half-written: parts but no {PARTS} "
                               "(rerun the command that wrote it)")
        names = [(n, None) for n in listed]
    for name, rec in names:
        if rec is not None and not PART_RE.match(str(name)):  # a parts file names its own
            raise PairkitError(f"table {url}/: {PARTS} names {name!a}, not a part")
        try:
            data = read_bytes(join(url, name), MAX_TABLE_BYTES)
        except FileNotFoundError:
            raise PairkitError(f"table {url}/: part {name} is missing") from None
        if rec is not None and (len(data) != rec.get("bytes")
                                or hashlib.sha256(data).hexdigest() != rec.get("sha256")):
            raise PairkitError(f"table {url}/: part {name} checksum mismatch (object changed "
                               "or damaged)")
        frames.append(parse_table(data, "parquet", f"{url}/{name}"))
    columns = list(frames[0].columns)
    for (name, _), frame in zip(names, frames, strict=True):
        if list(frame.columns) != columns:
            raise PairkitError(f"table folder {url}/: {name} has other columns than "
                               f"{names[0][0]}")
    return pd.concat(frames, ignore_index=True)

