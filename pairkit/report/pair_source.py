"""A local parquet pair table (a file or a folder of parts) read narrow for the report.

Every row is read of only the columns the summary needs (ids, scores, ranks, flags,
reasons: :func:`pairkit.report.pairs_view.summary_columns`); the other columns (paths,
``store_id``, anything else) are read batch by batch and kept only for the rows asked for:
the sampled anchors' rows, and the rows whose paths the store check compares. The values
are those :func:`pairkit.core.tables.read_table` gives (the same conversions), so the
report is the same as from the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.table_items import ReadApart, item_columns, path_sample
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    import pandas as pd

BATCH_ROWS = 65_536  # rows per batch of the columns read apart


@dataclass
class ParquetPairs:
    """``narrow``: every row, the summary's columns; ``columns``: all the table's."""

    parts: list[Path]
    columns: list[str]
    narrow: pd.DataFrame

    def rows(self, positions: np.ndarray, columns: list[str] | None = None) -> pd.DataFrame:
        """Every column (or ``columns``) of the rows at ``positions`` (ascending), in that
        order, with the index 0..n-1."""
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        from pairkit.core.tables import arrow_frame, unreadable

        want = list(self.columns if columns is None else columns)
        frames = []
        offset = 0
        for part in self.parts:
            pieces = []
            try:
                pf = pq.ParquetFile(part)
                for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=want):
                    n = batch.num_rows
                    lo, hi = np.searchsorted(positions, [offset, offset + n])
                    if hi > lo:
                        pieces.append(batch.take(pa.array(positions[lo:hi] - offset)))
                    offset += n
            except Exception as exc:  # pyarrow raises many types for a damaged file
                raise unreadable(part, exc) from exc
            if pieces:  # a part's rows converted together, as read_table converts a part
                frames.append(arrow_frame(pa.Table.from_batches(pieces)))
        release_arrow_memory()  # what the batches took
        if not frames:
            schema = pq.read_schema(self.parts[0])
            empty = pa.Table.from_batches([], schema=pa.schema(
                [schema.field(c) for c in want]))
            return arrow_frame(empty)
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    def apart(self, fmt: str) -> ReadApart:
        """What the store check needs of the columns left out: the ``store_id`` values and
        the path columns at :func:`path_sample`'s rows."""
        sample = path_sample(len(self.narrow))
        paths = [p for _, p in item_columns(fmt, self.columns) if p is not None]
        order = np.argsort(sample, kind="stable")
        got = self.rows(sample[order], paths)
        sampled = got.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
        return ReadApart(self.columns, self._store_ids(), sampled)

    def _store_ids(self) -> list[str] | None:
        """The distinct ``store_id`` values, read a batch at a time (None: no column)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from pairkit.core.tables import arrow_frame

        if "store_id" not in self.columns:
            return None
        seen: list[Any] = []
        for part in self.parts:
            for batch in pq.ParquetFile(part).iter_batches(batch_size=BATCH_ROWS,
                                                           columns=["store_id"]):
                seen.append(pc.unique(batch.column(0)))
        if not seen:
            return []
        values = pc.unique(pa.chunked_array(seen).combine_chunks())
        frame = arrow_frame(pa.table({"store_id": values}))  # read_table's conversion
        return [str(v) for v in frame["store_id"].dropna().unique()]


def parquet_parts(path: Path) -> list[Path]:
    """The parquet files of a table: the file, or a folder's parts (as read_table reads
    them; the same refusals)."""
    from pairkit.core.tables import check_parquet_columns, dataset_parts, table_kind

    parts = dataset_parts(path) if table_kind(path) == "dataset" else [path]
    for part in parts:
        with open(part, "rb") as fh:
            check_parquet_columns(fh, part)
    return parts


def parquet_columns(parts: list[Path], folder: Path) -> list[str]:
    """The column names of the parts (which must agree, as read_table requires)."""
    import pyarrow.parquet as pq

    def names(part: Path) -> list[str]:  # a pandas index stored as a column is no column
        return [n for n in pq.read_schema(part).names if not n.startswith("__index_level_")]

    columns = names(parts[0])
    for part in parts[1:]:
        if names(part) != columns:
            raise PairkitError(f"table folder {folder}: {part.name} has other columns than "
                               f"{parts[0].name}")
    return columns


def read_narrow(parts: list[Path], columns: list[str], narrow: list[str]) -> ParquetPairs:
    """Every row of the ``narrow`` columns of the parts (read_table's values)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from pairkit.core.tables import arrow_frame

    frames = [arrow_frame(pq.read_table(part, columns=narrow)) for part in parts]
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    del frames
    release_arrow_memory()
    return ParquetPairs(parts, columns, frame)


def release_arrow_memory() -> None:
    """Hand the memory pyarrow's pool keeps after a read back to the system (mimalloc and
    jemalloc keep freed pages for reuse: 50-90 MB after the narrow read of 1 M rows)."""
    import pyarrow as pa

    release = getattr(pa.default_memory_pool(), "release_unused", None)
    if release is not None:
        release()
