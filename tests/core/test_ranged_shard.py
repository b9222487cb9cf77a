"""Rows of a store on object storage read by byte ranges (pairkit/core/ranged_shard.py),
against the moto S3 server process: the rows equal the local store's (float16, float32,
scattered and contiguous ids, shard and block boundaries, an older store without block
checksums); a few rows fetch a few blocks, not the shard (the bytes counted at s3fs); a
flipped byte is refused in one line when its block is read; ``mine`` with the IVF lists
split reads from s3:// the same table as from the local store, and the worker of one
partition fetches its cells' blocks, not the store."""

from __future__ import annotations

import base64
import hashlib
import json
import pickle

import numpy as np
import pandas as pd
import pytest

from pairkit.core import ranged_shard, remote_store, store_writer
from pairkit.core.integrity import seal
from pairkit.core.store import Store
from pairkit.core.store_writer import write_store
from pairkit.errors import StoreError
from tests.core.test_remote_store import flip_byte, fs, rows


class Fetched:
    """The bytes s3fs fetches (every GET of an object's bytes goes through
    ``S3FileSystem._cat_file``: whole objects and ranges), by object name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import s3fs

        self.log: list[tuple[str, int]] = []
        original = s3fs.S3FileSystem._cat_file

        async def counted(fs_self, path, *args, **kwargs):  # noqa: ANN001, ANN202
            out = await original(fs_self, path, *args, **kwargs)
            self.log.append((str(path).rsplit("/", 1)[-1], len(out)))
            return out

        monkeypatch.setattr(s3fs.S3FileSystem, "_cat_file", counted)
        s3fs.S3FileSystem.clear_instance_cache()  # new instances mirror the counted one

    def bytes(self, prefix: str = "embeddings") -> int:
        return sum(n for name, n in self.log if name.startswith(prefix))

    def clear(self) -> None:
        self.log.clear()


def small_blocks(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Stores written from here on get block checksums of ``block`` bytes."""
    monkeypatch.setattr(remote_store, "SHARD_BLOCK_BYTES", block)
    monkeypatch.setattr(store_writer, "SHARD_BLOCK_BYTES", block)


def without_blocks(url: str) -> None:
    """Rewrite the store's manifest as an older writer's: no block checksums."""
    f = fs()
    key = f"{url[len('s3://'):]}/manifest.json"
    manifest = json.loads(f.cat_file(key))
    for s in manifest["shards"]:
        s.pop("blocks")
    f.pipe_file(key, (json.dumps(seal(manifest), indent=2) + "\n").encode())


ID_CASES = {
    "scattered": np.array([97, 3, 55, 3, 150, 0, 61, -1]),
    "contiguous": np.arange(31, 77),
    "empty": np.zeros(0, dtype=np.int64),
    "bounds": np.array([0, 19, 20, 39, 40, 59, 60, 159, 140, 139]),
    "all": np.arange(160),
}


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("blocks", ["blocks", "blocks-cut-runs", "older"])
def test_ranged_rows_equal_the_local_rows(s3, tmp_path, monkeypatch, dtype, blocks):
    small_blocks(monkeypatch, 200)  # 12 or 25 rows a block, rows across block bounds
    if blocks == "blocks-cut-runs":  # long runs cut, rows across the cuts
        monkeypatch.setattr(ranged_shard, "BATCH_BYTES", 500)
    if blocks == "older":
        monkeypatch.setattr(ranged_shard, "GAP_BYTES", 100)
        monkeypatch.setattr(ranged_shard, "STREAM_BYTES", 300)
    x, items = rows(n=160, d=4 if dtype == "float32" else 8)
    local = write_store(tmp_path / "st", x, items, shard_rows=20, dtype=dtype)
    write_store(f"{s3}/st", x, items, shard_rows=20, dtype=dtype)
    if blocks == "older":
        without_blocks(f"{s3}/st")
    lazy = Store.open(f"{s3}/st", verify=False)
    assert lazy.content_id == local.content_id
    assert ("blocks" in lazy.manifest["shards"][0]) == (blocks != "older")
    assert all(isinstance(a, ranged_shard.RangedShard) for a in lazy.shard_arrays())
    got_rows, want_rows = lazy.rows(), local.rows()
    for ids in ID_CASES.values():
        got = got_rows[ids]
        assert got.dtype == np.dtype(dtype) and got.shape == (len(ids), x.shape[1])
        np.testing.assert_array_equal(got, want_rows[ids])
    np.testing.assert_array_equal(got_rows[5:150:7], want_rows[5:150:7])
    np.testing.assert_array_equal(lazy.vectors(), local.vectors())
    shard = lazy.shard_arrays()[3]
    np.testing.assert_array_equal(shard[4], local.shard_arrays()[3][4])
    np.testing.assert_array_equal(np.asarray(shard), local.shard_arrays()[3])


def test_a_few_rows_fetch_a_few_blocks(s3, monkeypatch):
    """Three rows of a 5 MB shard: its first block (the header) and the block holding
    them, 2 MiB at most; the store opened with verify fetches every byte."""
    x, items = rows(n=20000, d=64)
    st = write_store(f"{s3}/st", x, items, dtype="float32")
    size = st.shards[0].bytes
    blocks = st.manifest["shards"][0]["blocks"]["sha256_base64"]
    assert size > 5_000_000 and len(base64.b64decode(blocks)) == 5 * 32
    fetched = Fetched(monkeypatch)
    lazy = Store.open(f"{s3}/st", verify=False)
    ids = np.array([9000, 9001, 9003])
    np.testing.assert_array_equal(lazy.rows()[ids], x[ids].astype(np.float32) /
                                  np.linalg.norm(x[ids], axis=1, keepdims=True))
    assert 0 < fetched.bytes() <= 2 << 20 and fetched.bytes() < size / 2
    assert len(fetched.log) == 2
    fetched.clear()
    lazy.rows()[np.array([9002])]  # the header is read once: one block
    assert fetched.bytes() == 1 << 20
    fetched.clear()
    Store.open(f"{s3}/st")  # the counter sees whole fetches too
    assert fetched.bytes() == size


def test_older_store_is_checked_whole_once_then_read_by_ranges(s3, monkeypatch):
    """Without block checksums a shard's sha256 is checked once (streamed, not kept),
    then its rows come by their own ranges."""
    x, items = rows(n=4000, d=64)
    st = write_store(f"{s3}/st", x, items, dtype="float32")
    without_blocks(f"{s3}/st")
    size = st.shards[0].bytes
    fetched = Fetched(monkeypatch)
    lazy = Store.open(f"{s3}/st", verify=False)
    lazy.rows()[np.array([10, 3000])]
    assert fetched.bytes() == size + 128 + 2 * 64 * 4
    fetched.clear()
    lazy.rows()[np.array([11])]
    assert fetched.bytes() == 64 * 4


@pytest.mark.parametrize("blocks", ["blocks", "older"])
def test_a_flipped_byte_is_refused_on_the_ranged_path(s3, monkeypatch, blocks):
    small_blocks(monkeypatch, 256)
    x, items = rows(n=60, d=8)
    write_store(f"{s3}/st", x, items, shard_rows=60, dtype="float32")
    if blocks == "older":
        without_blocks(f"{s3}/st")
    lazy = Store.open(f"{s3}/st", verify=False)
    name = lazy.shards[0].file
    flip_byte(f"{s3}/st", name, at=1000)  # in block 3 (bytes 768..1023): row 27
    again = Store.open(f"{s3}/st", verify=False)
    with pytest.raises(StoreError, match="checksum mismatch") as err:
        again.rows()[np.array([2, 27, 50])]
    text = str(err.value)
    assert "\n" not in text and name in text and "rerun the command" in text
    if blocks == "blocks":  # the block is named; rows of other blocks are still read
        assert "in bytes 768..1023" in text
        assert again.rows()[np.array([2, 50])].shape == (2, 8)
    with pytest.raises(StoreError, match="checksum mismatch"):
        Store.open(f"{s3}/st")  # whole, verified: refused as before


def test_mine_split_lists_from_s3_equal_local_and_a_partition_reads_its_blocks(
        s3, tmp_path, monkeypatch):
    """``mine`` with the lists split in 2 partitions, its blocks run by "workers" that
    read the store themselves (each a fresh process: nothing loaded), from s3://: the
    table and stats of the local store's run. The store's rows lie cluster by cluster and
    only a few items have a positive (the anchors), so a partition's cells and the
    anchors are a part of the blocks: its worker fetches those, not the whole store; a
    block's worker fetches its anchors' and their positives' blocks only."""
    from pairkit.core import store_rows
    from pairkit.core.tables import read_table
    from pairkit.index.options import IndexOptions
    from pairkit.mine.config import MineConfig
    from pairkit.mine.ivf_parts import search_partition
    from pairkit.mine.parts_run import mine_parts

    small_blocks(monkeypatch, 1024)  # 32 rows of 16 float16
    monkeypatch.setattr(ranged_shard, "GAP_BYTES", 0)  # as 1 MiB blocks: adjacent ones
    rng = np.random.default_rng(3)
    centers = 4 * np.eye(16)[:4]  # orthogonal: one cell a cluster
    per, n = 1000, 4000
    x = np.repeat(centers, per, axis=0) + 0.3 * rng.normal(size=(n, 16))
    sources = [f"c{i // per}/s{i}" if i % per >= 30 else f"c{i // per}/p{(i % per) // 2}"
               for i in range(n)]  # the first 30 of each cluster: 15 pairs
    items = pd.DataFrame({"path": [f"{s}-{i}.jpg" for i, s in enumerate(sources)],
                          "source": sources})
    local = write_store(tmp_path / "st", x.astype(np.float32), items, shard_rows=1000)
    write_store(f"{s3}/st", x.astype(np.float32), items, shard_rows=1000)
    store_bytes = sum(s.bytes for s in local.shards)
    cfg = MineConfig(batch_size=40, num_negatives=3)
    index = IndexOptions(kind="ivf", nlist=4, nprobe=1, device="cpu", backend="faiss")
    want = tmp_path / "local.parquet"
    sw = mine_parts(local.root, None, cfg, index, "triplet", str(want), False, None,
                    partitions=2)

    fetched = Fetched(monkeypatch)
    per_part: list[int] = []
    per_block: list[int] = []

    def workers(fn, shared, items_):  # noqa: ANN001, ANN202
        for item in items_:
            job = pickle.loads(pickle.dumps(shared))  # what a worker receives
            store_rows.forget_loaded()  # a new process: nothing read yet
            before = fetched.bytes()
            out = fn(job, item)
            (per_part if fn is search_partition else per_block).append(
                fetched.bytes() - before)
            yield out
        store_rows.forget_loaded()

    workers.workers_read_store = True  # type: ignore[attr-defined]
    workers.workers = 2  # type: ignore[attr-defined]
    got = tmp_path / "s3.parquet"
    sg = mine_parts(f"{s3}/st", None, cfg, index, "triplet", str(got), False, workers,
                    partitions=2)
    table = read_table(got)
    assert len(table) > 0 and "in 2 partitions" in sg["index"]
    assert sg["index"].endswith("the blocks of anchors: their anchors' and positives' rows "
                                "read by byte ranges")
    pd.testing.assert_frame_equal(table, read_table(want))
    skip = {"seconds", "index", "store"}
    assert {k: v for k, v in sg.items() if k not in skip} == \
        {k: v for k, v in sw.items() if k not in skip}
    # each partition: its 2 clusters' blocks (half the rows), the shards' headers and
    # the anchors' blocks (about 0.6 of the store here), never the whole store
    assert len(per_part) == 2
    assert all(store_bytes / 2 < b < 0.75 * store_bytes for b in per_part), \
        (per_part, store_bytes)
    # the blocks (each a fresh process here) read only their anchors' and positives' rows
    # (the views of a source side by side): a few blocks each, never the store
    assert len(per_block) == 3 and all(0 < b < 0.2 * store_bytes for b in per_block), \
        (per_block, store_bytes)


def test_mine_split_lists_to_an_s3_dataset_equal_local_and_leave_no_candidates(
        s3, tmp_path, monkeypatch):
    """``mine -o s3://bucket/pairs/`` with the lists split in 3 partitions, its
    partitions and blocks run by "workers" (each gets a pickled copy of the job): the
    partitions' candidates go to objects beside the dataset's parts under the run's
    token and are gone after the commit; the table read back and the stats are the local
    run's. A run whose partition fails leaves no object of it (candidates included)."""
    from pairkit.core import store_rows
    from pairkit.core.tables import read_table
    from pairkit.errors import PairkitError
    from pairkit.index.options import IndexOptions
    from pairkit.mine import ivf_parts
    from pairkit.mine.config import MineConfig
    from pairkit.mine.parts_run import mine_parts

    rng = np.random.default_rng(5)
    n = 2400
    x = rng.normal(size=(n, 12)) + 3 * np.eye(12)[rng.integers(0, 6, n)]
    items = pd.DataFrame({"path": [f"i{i}.jpg" for i in range(n)],
                          "source": [f"s{i // 2}" for i in range(n)]})
    local = write_store(tmp_path / "st", x.astype(np.float32), items, shard_rows=700)
    write_store(f"{s3}/st", x.astype(np.float32), items, shard_rows=700)
    cfg = MineConfig(batch_size=500, num_negatives=4, hard=True)
    index = IndexOptions(kind="ivf", nlist=6, nprobe=2, device="cpu", backend="faiss")
    want = tmp_path / "local.parquet"
    sw = mine_parts(local.root, None, cfg, index, "n-tuple", str(want), False, None,
                    partitions=0)
    seen: list[str] = []

    def workers(fn, shared, items_):  # noqa: ANN001, ANN202
        for item in items_:
            job = pickle.loads(pickle.dumps(shared))  # what a worker receives
            store_rows.forget_loaded()
            out = fn(job, item)
            if fn is not ivf_parts.search_partition:  # the blocks: candidates are there
                fs().invalidate_cache()
                seen.extend(n for n in fs().ls(f"{s3[5:]}/pairs") if "/.cand-" in n)
            yield out
        store_rows.forget_loaded()

    workers.workers_read_store = True  # type: ignore[attr-defined]
    workers.workers = 3  # type: ignore[attr-defined]
    sg = mine_parts(f"{s3}/st", None, cfg, index, "n-tuple", f"{s3}/pairs/", False, workers)
    assert "its lists in 3 partitions" in sg["index"]
    # 5 blocks of anchors in a store of one 1 MiB piece a shard: fetched whole
    assert sg["index"].endswith("the store fetched whole by each (their anchors' and "
                                "positives' rows span most of it)")
    assert len(seen) == 5 * 3 * 5 and all(n.endswith(".npz") for n in seen)  # 5 blocks
    fs().invalidate_cache()
    names = sorted(n.rsplit("/", 1)[-1] for n in fs().ls(f"{s3[5:]}/pairs"))
    assert not [n for n in names if n.startswith(".")]  # no candidates, no keys left
    assert "_pairkit_parts.json" in names
    pd.testing.assert_frame_equal(read_table(f"{s3}/pairs/"), read_table(want))
    skip = {"seconds", "index", "store"}
    assert {k: v for k, v in sg.items() if k not in skip} == \
        {k: v for k, v in sw.items() if k not in skip}

    calls = []
    search = ivf_parts.search_partition

    def failing(job, part):  # noqa: ANN001, ANN202
        calls.append(part)
        if len(calls) == 2:  # the first partition wrote its candidates
            raise PairkitError("partition lost")
        return search(job, part)

    monkeypatch.setattr(ivf_parts, "search_partition", failing)
    with pytest.raises(PairkitError, match="partition lost"):
        mine_parts(f"{s3}/st", None, cfg, index, "n-tuple", f"{s3}/other/", False, workers)
    assert calls == [0, 1]
    fs().invalidate_cache()
    assert not fs().exists(f"{s3[5:]}/other") or not fs().ls(f"{s3[5:]}/other")


def test_block_checksums_in_the_manifest(tmp_path):
    """Every writer records a shard's block checksums (a local store too, so that a copy
    of it on object storage has them); a malformed ``blocks`` is refused in one line."""
    x, items = rows(n=50)
    st = write_store(tmp_path / "st", x, items, shard_rows=20)
    data = (tmp_path / "st" / st.shards[0].file).read_bytes()
    rec = st.manifest["shards"][0]["blocks"]
    assert rec == {"bytes": 1 << 20, "sha256_base64": base64.b64encode(
        hashlib.sha256(data).digest()).decode()}
    path = tmp_path / "st" / "manifest.json"
    manifest = json.loads(path.read_text())
    two = base64.b64encode(hashlib.sha256(data).digest() * 2).decode()
    for bad, says in (({"bytes": 1 << 20, "sha256_base64": two}, "base64 of 1 sha256"),
                      ({"bytes": 0, "sha256_base64": ""}, "an integer >= 1"),
                      ({"bytes": 1 << 20, "sha256_base64": "not base64!"}, "base64 of 1"),
                      ({"bytes": 1 << 20, "sha256_base64": [1]}, "base64 of 1")):
        manifest["shards"][0]["blocks"] = bad
        path.write_text(json.dumps(seal(manifest)))
        with pytest.raises(StoreError, match="shards\\[0\\].blocks") as err:
            Store.open(tmp_path / "st")
        assert says in str(err.value) and "\n" not in str(err.value)


def test_rows_read_by_ranges_kept_beside_the_held_copy(s3, monkeypatch):
    """A worker of ``mine --ray``'s split lists loads the store twice, its blocks' copy
    (fetched whole, held) and its searches' rows (by ranges, holding nothing): both are
    kept, so neither makes the other fetch again; another store replaces both."""
    from pairkit.core import store_rows
    from pairkit.core.store_rows import StoreRows

    small_blocks(monkeypatch, 256)
    x, items = rows(n=300, d=8)
    st = write_store(f"{s3}/st", x, items, shard_rows=100)
    fetched = Fetched(monkeypatch)
    store_rows.forget_loaded()
    whole = StoreRows.of(st, streamed=True)
    ranged = StoreRows.of(st, streamed=True, ranged=True)
    assert ranged.by_ranges and not whole.by_ranges
    held = whole.load()
    assert fetched.bytes() == sum(s.bytes for s in st.shards)
    fetched.clear()
    some = ranged.load()
    assert isinstance(some.arrays[0], ranged_shard.RangedShard)
    np.testing.assert_array_equal(some[np.array([5, 250])], held[np.array([5, 250])])
    assert 0 < fetched.bytes() < sum(s.bytes for s in st.shards)
    fetched.clear()
    assert whole.load() is held and ranged.load() is some and fetched.bytes() == 0
    assert len(store_rows.LOADED) == 2
    other = write_store(f"{s3}/other", x[:50], items[:50])
    StoreRows.of(other, streamed=True, ranged=True).load()
    assert len(store_rows.LOADED) == 1
    store_rows.forget_loaded()


@pytest.mark.parametrize("seed", range(6))
def test_ranges_cover_every_row_whatever_the_sizes(monkeypatch, seed):
    """Random block, batch and gap sizes (rows across block bounds and across the cuts
    of long runs), random ids: the rows are numpy's, and only the blocks holding them are
    checked (a damaged block elsewhere is never read). The object served from memory."""
    import io

    from pairkit.core import remote
    from pairkit.core.integrity import shard_sums

    rng = np.random.default_rng(seed)
    dtype = ["float16", "float32"][seed % 2]
    n, d = int(rng.integers(1, 400)), int(rng.integers(1, 40))
    x = rng.normal(size=(n, d)).astype(dtype)
    buf = io.BytesIO()
    np.save(buf, x)
    data = bytearray(buf.getvalue())
    block = int(rng.integers(16, 700))
    digests = shard_sums(io.BytesIO(bytes(data)), block)["blocks"]["sha256_base64"]
    rec = {"file": "embeddings-00000.npy", "rows": n, "bytes": len(data),
           "sha256": hashlib.sha256(data).hexdigest()}
    if seed < 4:
        rec["blocks"] = {"bytes": block, "sha256_base64": digests}
    monkeypatch.setattr(ranged_shard, "BATCH_BYTES", int(rng.integers(1, 3000)))
    monkeypatch.setattr(ranged_shard, "GAP_BYTES", int(rng.integers(0, 2000)))
    calls = []

    def served(url, starts, ends):  # noqa: ANN001, ANN202
        calls.append(list(zip(starts, ends, strict=True)))
        return [bytes(data[s:e]) for s, e in zip(starts, ends, strict=True)]

    monkeypatch.setattr(remote, "read_ranges", served)
    shard = ranged_shard.RangedShard("s3://b/st", rec, d, dtype)
    for _ in range(5):
        ids = rng.integers(-n, n, size=int(rng.integers(0, 2 * n)))
        np.testing.assert_array_equal(shard[ids], x[ids])
    np.testing.assert_array_equal(np.asarray(shard), x)
    np.testing.assert_array_equal(shard[n // 2:], x[n // 2:])
    count = -(-len(data) // block)  # blocks
    if "blocks" in rec and count > 3:  # damage the last block: only it refuses
        data[-1] ^= 1
        fresh = ranged_shard.RangedShard("s3://b/st", rec, d, dtype)
        ok = np.arange(n)[(128 + (np.arange(n) + 1) * d * x.itemsize - 1) // block
                          < count - 1]
        np.testing.assert_array_equal(fresh[ok], x[ok])
        with pytest.raises(StoreError, match="checksum mismatch"):
            fresh[np.array([n - 1])]


def test_a_local_store_stays_memory_mapped(tmp_path):
    """``ranged`` changes nothing for a store in a folder: its shards memory-mapped."""
    from pairkit.core import store_rows
    from pairkit.core.store_rows import StoreRows

    x, items = rows(n=60)
    st = write_store(tmp_path / "st", x, items, shard_rows=20)
    store_rows.forget_loaded()
    got = StoreRows.of(st, streamed=True, ranged=True)
    assert not got.by_ranges
    assert all(isinstance(a, np.memmap) for a in got.load().arrays)
    store_rows.forget_loaded()
