"""A dataset on object storage written part by part and committed once
(pairkit/core/remote_parts.py), against the real S3 server process (tests/s3server.py):
the commit names exactly the parts, in order; of two writers only the first commits and
the other leaves nothing; a failed writer's objects go; --force replaces the old parts."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from pairkit.core.remote import list_names, put, read_bytes
from pairkit.core.remote_parts import PARTS, start_parts
from pairkit.core.tables import read_table
from pairkit.errors import PairkitError


def part(values: list[int]) -> tuple[bytes, int]:
    buf = io.BytesIO()
    pd.DataFrame({"x": values}).to_parquet(buf, index=False)
    return buf.getvalue(), len(values)


def test_parts_committed_in_order_empty_ones_dropped(s3):
    w = start_parts(f"{s3}/t/")
    assert w.url == f"{s3}/t" and w.old_tag is None
    records = [w.put_part(i, *part(v)) for i, v in enumerate([[1, 2], [], [3]])]
    assert list_names(f"{s3}/t")  # put, not yet committed: a reader refuses them
    with pytest.raises(PairkitError, match="half-written"):
        read_table(f"{s3}/t/")
    w.commit(records, force=False)
    assert read_table(f"{s3}/t/")["x"].tolist() == [1, 2, 3]
    doc = json.loads(read_bytes(f"{s3}/t/{PARTS}"))
    assert [p["file"] for p in doc["parts"]] == [w.part_name(0), w.part_name(2)]
    assert sorted(list_names(f"{s3}/t")) == sorted([PARTS, w.part_name(0), w.part_name(2)])


def test_of_two_writers_the_second_commit_is_refused_and_leaves_nothing(s3):
    a, b = start_parts(f"{s3}/t"), start_parts(f"{s3}/t")
    ra, rb = [a.put_part(0, *part([1]))], [b.put_part(0, *part([2]))]
    a.commit(ra, force=False)
    with pytest.raises(PairkitError, match="written meanwhile by another process"):
        b.commit(rb, force=True)
    assert read_table(f"{s3}/t/")["x"].tolist() == [1]
    assert not [n for n in list_names(f"{s3}/t") if b.token in n]


def test_abort_removes_only_this_writers_objects_and_force_the_old_parts(s3):
    first = start_parts(f"{s3}/t")
    first.commit([first.put_part(0, *part([1]))], force=False)
    put(f"{s3}/t/notes.txt", b"someone else's")
    failed = start_parts(f"{s3}/t")
    failed.put_part(0, *part([9]))
    put(f"{s3}/t/.neg-000000-{failed.token}.keys", b"\0\0\0\0")
    failed.abort()
    assert sorted(list_names(f"{s3}/t")) == sorted([PARTS, first.part_name(0), "notes.txt"])
    again = start_parts(f"{s3}/t")
    assert again.old_parts == {first.part_name(0)}
    again.commit([again.put_part(0, *part([5, 6]))], force=True)
    assert read_table(f"{s3}/t/")["x"].tolist() == [5, 6]
    assert sorted(list_names(f"{s3}/t")) == sorted([PARTS, again.part_name(0), "notes.txt"])


def test_an_object_put_by_another_process_after_a_listing_is_read(s3):
    """A Ray worker puts an object into a prefix the driver listed before (the output
    check): the driver reads it. s3fs keeps the listing and sized the object from it,
    so the read said the object did not exist (found by the race test of
    tests/distributed/test_ray.py)."""
    import os

    import s3fs

    put(f"{s3}/t/a", b"1")
    assert list(list_names(f"{s3}/t")) == ["a"]  # the listing is cached in this process
    other = s3fs.S3FileSystem(skip_instance_cache=True,
                              client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
    other.pipe_file(f"{s3[len('s3://'):]}/t/.keys-b", b"22")  # "another process"
    assert read_bytes(f"{s3}/t/.keys-b") == b"22"
    assert read_bytes(f"{s3}/t/.keys-b", max_bytes=10) == b"22"


@pytest.mark.parametrize("where", ["local", "s3"])
def test_write_whole_puts_bytes_and_buffers_whole_and_replaces(s3, tmp_path, where):
    import numpy as np

    from pairkit.core.remote import write_whole

    target = f"{s3}/w/keys" if where == "s3" else str(tmp_path / "sub" / "keys")
    keys = np.arange(5, dtype=np.uint32)
    write_whole(target, memoryview(keys).cast("B"))
    got = read_bytes(target) if where == "s3" else Path(target).read_bytes()
    assert np.frombuffer(got, dtype=np.uint32).tolist() == [0, 1, 2, 3, 4]
    write_whole(target, b"")  # replaced whole, an empty buffer too
    assert (read_bytes(target) if where == "s3" else Path(target).read_bytes()) == b""
    if where == "local":  # no temp file is left beside it
        assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["keys"]


def test_a_csv_object_quotes_a_carriage_return_as_a_local_file_does(tmp_path):
    """Found by a bug hunt (2026-12-06): a CSV table put on object storage split the row
    of a path holding a carriage return (the local writer's quoting was not applied)."""
    import io

    import pandas as pd

    from pairkit.core.remote_tables import frame_bytes
    from pairkit.core.tables import read_csv_frame, write_table

    df = pd.DataFrame({"store_id": ["s", "s"], "anchor_path": ["a\r0.png", "b.png"],
                       "score": [0.5, 0.25]})
    data = frame_bytes(df, "csv")
    write_table(df, tmp_path / "local.csv")
    assert data == (tmp_path / "local.csv").read_bytes()
    back = read_csv_frame(io.BytesIO(data))
    assert back["anchor_path"].tolist() == ["a\r0.png", "b.png"]


def test_a_prefix_of_spark_or_pyarrow_parts_is_read_and_a_store_is_not(s3):
    """Found by a bug hunt (hunt-l 8): a prefix of Spark's parts (``part-00000-UUID-c000
    .snappy.parquet`` and ``_SUCCESS``) or pyarrow's (``part-0.parquet`` ...) was refused,
    though the docs said it is read; in name order, numbers compared as numbers. A store's
    prefix (its ``items-*.parquet``) is no table, and pairkit's uncommitted parts are still
    refused."""
    uuid = "1b2c3d4e-5f60-4718-9a0b-c1d2e3f40516"
    for i in range(3):
        put(f"{s3}/sp/part-{i:05d}-{uuid}-c000.snappy.parquet", part([i, i])[0])
    put(f"{s3}/sp/_SUCCESS", b"")
    assert read_table(f"{s3}/sp/")["x"].tolist() == [0, 0, 1, 1, 2, 2]
    for i in (0, 2, 10, 1):
        put(f"{s3}/pa/part-{i}.parquet", part([i])[0])
    assert read_table(f"{s3}/pa/")["x"].tolist() == [0, 1, 2, 10]
    put(f"{s3}/st/manifest.json", b"{}")
    put(f"{s3}/st/items-00000-1a2b3c4d.parquet", part([1])[0])
    with pytest.raises(PairkitError, match=r"st/ is a store \(it holds manifest.json\)"):
        read_table(f"{s3}/st/")
    put(f"{s3}/none/_SUCCESS", b"")
    with pytest.raises(PairkitError, match=r"none/ holds no \.parquet objects"):
        read_table(f"{s3}/none/")


def test_a_part_changed_after_the_commit_is_refused(s3):
    """The parts file names each part's size and sha256: a part replaced by another of
    the same size after the commit is refused in one line, not read as the table (hunt
    3b: dropping the sha256 check survived)."""
    w = start_parts(f"{s3}/t")
    records = [w.put_part(0, *part([1, 2])), w.put_part(1, *part([3]))]
    w.commit(records, force=False)
    assert read_table(f"{s3}/t/")["x"].tolist() == [1, 2, 3]
    data, _ = part([7])
    assert len(data) == len(read_bytes(f"{s3}/t/{w.part_name(1)}"))
    put(f"{s3}/t/{w.part_name(1)}", data)
    with pytest.raises(PairkitError, match=f"part {w.part_name(1)} checksum mismatch"):
        read_table(f"{s3}/t/")


def test_a_dataset_written_with_parts_of_one_row_keeps_every_row(s3, tmp_path):
    """write_table to a dataset folder with parts of 1, 0 and 2 rows, on object storage
    and locally: every row back in order, the empty part left out (hunt 3b: dropping
    one-row parts on object storage survived)."""
    from pairkit.core.tables import write_table

    df = pd.DataFrame({"x": [1, 2, 3]})
    for where in (f"{s3}/t/", str(tmp_path / "t") + "/"):
        write_table(df, where, part_rows=[1, 0, 2])
        assert read_table(where)["x"].tolist() == [1, 2, 3]
    doc = json.loads(read_bytes(f"{s3}/t/{PARTS}"))
    assert [p["rows"] for p in doc["parts"]] == [1, 2]
