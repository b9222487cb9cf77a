"""Committing a table written part by part (parquet files in a temp folder beside the
output) as one output, without holding the table: a ``.parquet`` file streamed one part
at a time into a temp file that is then renamed into place, or a dataset folder
(``-o DIR/``) whose parts are renamed ``part-00000.parquet`` ... in order and the folder
put in place as :func:`pairkit.core.tables.write_table` does. Either way the output is
the table the parts make end to end, read back as the one ``write_table`` writes of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pairkit.core.atomic import atomic_path
from pairkit.core.tables import PART_PATTERN, check_table_output, commit_dataset_folder, table_kind


def commit_parts(folder: Path, names: list[str], rows: list[int], output: str,
                 force: bool) -> None:
    """Commit the parts ``names`` of ``folder`` (``rows`` rows each, in table order) as
    ``output`` (a ``.parquet`` file or a dataset folder); ``folder`` holds nothing else
    but files whose names start with a dot. Parts of no rows are left out (one is kept
    when all are empty), as in ``write_table``. The folder is used up."""
    keep = [n for n, r in zip(names, rows, strict=True) if r > 0] or names[:1]
    target = check_table_output(output, force)
    if table_kind(output) == "dataset":
        for name in names:
            if name not in keep:
                (folder / name).unlink()
        for i, name in enumerate(keep):  # i <= the part's own number: no name is taken
            (folder / name).rename(folder / PART_PATTERN.format(i))
        for extra in folder.iterdir():
            if extra.name.startswith("."):
                extra.unlink()
        commit_dataset_folder(folder, target)
        return
    write_streamed(folder, keep, target, force)


def write_streamed(folder: Path, names: list[str], target: Path, force: bool) -> None:
    """One parquet file of the parts ``names`` end to end (their schemas unified: a
    column that is all null in one part takes its type from the others), one part in
    memory at a time."""
    import pyarrow.parquet as pq

    schema = unified_schema([pq.read_schema(folder / n) for n in names])
    with atomic_path(target, replace=force) as tmp, pq.ParquetWriter(tmp, schema) as writer:
        for name in names:
            writer.write_table(pq.read_table(folder / name).cast(schema))


def unified_schema(schemas: list[Any]) -> Any:
    """The schema of the parts end to end, with the pandas metadata a whole-table
    ``to_parquet`` writes: each column's entry from a part where it is not all null."""
    import pyarrow as pa

    schema = pa.unify_schemas(_one_string_type(schemas), promote_options="default")
    metas = [json.loads(s.metadata[b"pandas"]) for s in schemas
             if s.metadata and b"pandas" in s.metadata]
    if not metas:
        return schema
    meta = metas[0]
    for j, column in enumerate(meta["columns"]):
        name = column.get("field_name")
        if name not in schema.names or pa.types.is_null(schema.field(name).type):
            continue
        for s, m in zip(schemas, metas, strict=False):
            if name in s.names and not pa.types.is_null(s.field(name).type):
                meta["columns"][j] = next(c for c in m["columns"] if c.get("field_name") == name)
                break
    return schema.with_metadata({**(schema.metadata or {}),
                                 b"pandas": json.dumps(meta).encode()})


def _one_string_type(schemas: list[Any]) -> list[Any]:
    """``schemas`` with a column that is ``string`` in some and ``large_string`` in others
    made ``large_string`` in all (both are pandas' text; a block whose rows were
    concatenated gets the large one): the only promotion between two non-null types made
    here, so numbers of two types still fail loudly."""
    import pyarrow as pa

    large = {f.name for s in schemas for f in s if pa.types.is_large_string(f.type)}
    if not large:
        return schemas
    out = []
    for s in schemas:
        for i, f in enumerate(s):
            if f.name in large and pa.types.is_string(f.type):
                s = s.set(i, f.with_type(pa.large_string()))
        out.append(s)
    return out
