"""Shards written block by block (hunt-r 6): the same bytes and checksums as normalising
the whole shard at once, and memory one block, not three copies of the shard."""

from __future__ import annotations

import io
import json
import tracemalloc

import numpy as np
import pandas as pd
import pytest

from pairkit.core import store_writer
from pairkit.core.integrity import shard_sums
from pairkit.core.store import l2_normalize
from pairkit.core.store_writer import write_shard, write_store


def reference_shard(vectors: np.ndarray, dtype: str) -> bytes:
    """The shard file as pairkit wrote it before hunt-r 6: the whole shard normalised,
    cast, ``np.save``."""
    buf = io.BytesIO()
    np.save(buf, l2_normalize(np.asarray(vectors)).astype(dtype))
    return buf.getvalue()


def mapped_input(tmp_path, n: int, dim: int, seed: int = 0) -> np.ndarray:
    """A memory-mapped float32 .npy with rows of every kind l2_normalize handles: plain,
    huge (float32 norm overflows), tiny (underflows) and zero."""
    rng = np.random.default_rng(seed)
    x = np.lib.format.open_memmap(tmp_path / "in.npy", mode="w+", dtype=np.float32,
                                  shape=(n, dim))
    x[:] = rng.standard_normal((n, dim), dtype=np.float32)
    x[3] *= 1e37
    x[7] *= 1e-30
    x[11] = 0
    x.flush()
    return np.load(tmp_path / "in.npy", mmap_mode="r")


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("dim", [3, 16, 100])
def test_shards_written_in_blocks_equal_the_whole_shard_normalised(
        tmp_path, monkeypatch, dtype: str, dim: int) -> None:
    vectors = mapped_input(tmp_path, 1000, dim)
    # blocks of 37 rows or so (a last short one) in shards of 300 rows (a last of 100)
    monkeypatch.setattr(store_writer, "NORMALIZE_BLOCK_BYTES", 37 * 4 * dim)
    items = pd.DataFrame({"path": [f"p/{i}.jpg" for i in range(1000)]})
    write_store(tmp_path / "s", vectors, items, dtype=dtype, shard_rows=300)
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert [s["rows"] for s in manifest["shards"]] == [300, 300, 300, 100]
    for k, shard in enumerate(manifest["shards"]):
        want = reference_shard(vectors[300 * k:300 * (k + 1)], dtype)
        assert (tmp_path / "s" / shard["file"]).read_bytes() == want
        sums = shard_sums(io.BytesIO(want), store_writer.SHARD_BLOCK_BYTES)
        assert {key: shard[key] for key in sums} == sums


def test_write_shard_holds_one_block_not_the_shard(tmp_path, monkeypatch) -> None:
    """Failed before the fix: the 40,000 x 64 shard was normalised whole (10 MB of
    float32) and cast (another 5 MB), beside the mapped input. Now: one block (64 KB
    here) and the checksums' 1 MiB reads."""
    vectors = mapped_input(tmp_path, 40_000, 64)
    monkeypatch.setattr(store_writer, "NORMALIZE_BLOCK_BYTES", 1 << 16)
    tracemalloc.start()
    try:
        record = write_shard(tmp_path, "embeddings-00000.npy", vectors, "float16")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20
    assert (tmp_path / "embeddings-00000.npy").read_bytes() == reference_shard(vectors,
                                                                               "float16")
    assert record["rows"] == 40_000


def test_a_non_finite_row_still_stops_the_shard(tmp_path, monkeypatch) -> None:
    vectors = np.ones((50, 4), np.float32)
    vectors[[10, 40]] = np.inf
    monkeypatch.setattr(store_writer, "NORMALIZE_BLOCK_BYTES", 64)
    with pytest.raises(Exception, match="2 rows are non-finite"):
        write_shard(tmp_path, "embeddings-00000.npy", vectors, "float16")
    assert list(tmp_path.iterdir()) == []


def test_a_written_shard_that_changed_before_its_commit_is_refused(tmp_path) -> None:
    """A shard written apart (a Ray worker's) whose file is not the size its record says
    when it is added is refused, not committed as a store that fails at every open
    (hunt 3b: dropping the size check survived)."""
    from pairkit.core.store import Store
    from pairkit.core.store_writer import StoreWriter, prepare_store_dir
    from pairkit.errors import PairkitError

    root = prepare_store_dir(tmp_path / "s", False)
    items = pd.DataFrame({"path": [f"{i}.jpg" for i in range(4)]})
    with StoreWriter.create(root, 4, "float16") as writer:
        name = writer.next_shard_name()
        record = write_shard(root, name, np.eye(4, dtype=np.float32), "float16")
        with open(root / name, "ab") as fh:
            fh.write(b"\0" * 8)
        with pytest.raises(PairkitError, match=f"shard {name} does not match its record"):
            writer.add_written_shard(record, items)
        with pytest.raises(PairkitError, match="does not match its record"):
            writer.add_written_shard({**record, "rows": 3}, items)
        (root / name).unlink()
        record = write_shard(root, name, np.eye(4, dtype=np.float32), "float16")
        writer.add_written_shard(record, items)
        writer.commit()
    assert Store.open(root).count == 4


def test_the_next_shard_number_is_past_the_highest_not_the_count() -> None:
    """Shards numbered with gaps (a cluster's partitions, numbered by offset, one of them
    empty): the next shard takes the number after the highest, never one a committed
    shard has (hunt 3b: numbering by the count survived; it names embeddings-00002.npy
    again here, which write_shard would replace)."""
    from pairkit.core.shard_book import ShardBook

    book = ShardBook()
    book.manifest = {"shards": [{"file": "embeddings-00000.npy"},
                                {"file": "embeddings-00002.npy"}]}
    assert book.next_shard_number() == 3
    assert book.next_shard_number(offset=4) == 7
    book.manifest = {"shards": []}
    assert book.next_shard_number() == 0
