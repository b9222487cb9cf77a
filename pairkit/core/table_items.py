"""The items a pair table names (its id and path columns, by format) and whether a table
fits a store: its ``store_id``, its ids in range, and the paths of a sample of rows equal
to the store's for those ids. Two stores of the same vectors with other item tables share
a content id (it hashes the rows), so the paths are what tell them apart."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from pairkit.core.store import Store

PATH_SAMPLE = 256  # rows whose paths are compared with the store's


def check_negative_columns(columns: list[str]) -> None:
    """UsageError for a pair table holding both ``negative_id`` (triplet) and
    ``negative_id_1..`` (n-tuple) columns: which negatives it means is ambiguous, so no
    reader (train, report, PairImages) picks one of the two."""
    cols = [str(c) for c in columns]
    if "negative_id" in cols and any(re.fullmatch(r"negative_id_\d+", c) for c in cols):
        from pairkit.errors import UsageError

        raise UsageError("pair table has both negative_id (triplet) and negative_id_1.. "
                         "(n-tuple) columns, so which negatives it means is ambiguous: keep "
                         "one of the two")


def item_columns(fmt: str, columns: list[str]) -> list[tuple[str, str | None]]:
    """(id column, path column or None) of every item a table names, anchor first."""
    cols = set(map(str, columns))

    def pair(prefix: str) -> tuple[str, str | None]:
        path = f"{prefix}_path"
        return f"{prefix}_id", path if path in cols else None

    if fmt == "triplet":
        return [pair("anchor"), pair("positive"), pair("negative")]
    if fmt == "labeled-pair":
        return [pair("anchor"), pair("other")]
    if fmt in ("dedup", "search"):
        return [("id", "path" if "path" in cols else None)]
    out = [pair("anchor"), pair("positive")]
    for j in negative_slots(columns):
        path = f"negative_path_{j}"
        out.append((f"negative_id_{j}", path if path in cols else None))
    return out


def negative_slots(columns: list[str]) -> list[int]:
    """The j of every ``negative_id_j`` column of an n-tuple table, in order."""
    found = (re.fullmatch(r"negative_id_(\d+)", str(c)) for c in columns)
    return sorted(int(m.group(1)) for m in found if m)


@dataclass(frozen=True)
class ReadApart:
    """What :func:`table_mismatch` reads of the columns a narrow read of a table left out
    (``pairkit report`` reads ids and scores of every row, the rest only where needed):
    the table's ``columns``, its ``store_id`` values (None: no such column) and its path
    columns at the rows :func:`path_sample` picks, in that order."""

    columns: list[str]
    store_ids: list[str] | None
    sampled_paths: pd.DataFrame


def path_sample(n_rows: int) -> np.ndarray:
    """The rows (of ``n_rows``) whose paths :func:`table_mismatch` compares with the store's:
    PATH_SAMPLE of them drawn with seed 0, or all."""
    rng = np.random.default_rng(0)
    return (rng.choice(n_rows, PATH_SAMPLE, replace=False) if n_rows > PATH_SAMPLE
            else np.arange(n_rows))


def table_mismatch(table: pd.DataFrame, fmt: str, store: Store,
                   apart: ReadApart | None = None) -> str | None:
    """Why ``table`` does not belong to ``store``, or None when it does. ``apart``: what a
    narrow ``table`` (its id columns, every row) left out."""
    import pandas as pd

    from pairkit.core.tables import named_store_ids

    if apart is not None:
        named = apart.store_ids
    else:
        named = (list(table["store_id"].dropna().unique()) if "store_id" in table.columns
                 else None)
    if named is not None:
        ids = named_store_ids(named)
        other = sorted(ids - {store.content_id})
        if other:
            return (f"the table came from another store (store_id {other[0]}, "
                    f"store {store.root} is {store.content_id})")
    store_paths = store.items["path"].to_numpy(dtype=object)
    image_root = store.manifest.get("image_root")
    sample = path_sample(len(table))
    columns = apart.columns if apart is not None else list(table.columns)
    for id_col, path_col in item_columns(fmt, columns):
        ids = item_ids(table, id_col, fmt)
        valid = ids[ids >= 0]
        if len(valid) and int(valid.max()) >= store.count:
            return (f"{id_col} {int(valid.max())} is not a row of store {store.root} "
                    f"({store.count} rows)")
        # -1 is "none" only where a table may leave an item out (a negative, a positive,
        # a search padding row); an anchor or a dedup member is always a store row
        if (ids < (0 if id_col in ("anchor_id", "id") and fmt != "search" else -1)).any():
            return f"{id_col} holds negative ids"
        if path_col is None:
            continue
        for j, row in enumerate(sample):
            i = int(ids[row])
            got = (apart.sampled_paths[path_col].iat[j] if apart is not None
                   else table[path_col].iat[row])
            if i < 0 or pd.isna(got):
                continue
            want = str(store_paths[i])
            got = str(got)
            if got != want and not (image_root and os.path.isabs(got) and os.path.normpath(got)
                                    == os.path.normpath(os.path.join(image_root, want))):
                return f"row {i}: the table says {got!r}, store {store.root} says {want!r}"
    return None


def item_ids(table: pd.DataFrame, column: str, fmt: str) -> np.ndarray:
    """Integer ids of a column of a ``fmt`` table; empty cells (a missing negative) are -1;
    a value that is not a whole number is refused as ``train`` refuses it (not cut to one),
    naming the kind of table (``dedup table``, ``search table``, else ``pair table``)."""
    from pairkit.core.pairs import integer_ids

    kind = f"{fmt} table" if fmt in ("dedup", "search") else "pair table"
    return integer_ids(table[column], column, allow_missing=True, table=kind)
