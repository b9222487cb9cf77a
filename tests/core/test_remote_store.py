"""Stores and tables on object storage, against a real S3 server process (moto_server on
127.0.0.1, tests/s3server.py): the same rows as on disk, the commit protocol without
rename (unique names, the manifest last and conditional), checksums on read, and URLs
that never turn into local folders."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pairkit.core.store import Store
from pairkit.core.store_writer import StoreWriter, write_store
from pairkit.errors import PairkitError, StoreError, UsageError


def rows(n: int = 50, d: int = 8, seed: int = 0) -> tuple[np.ndarray, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    items = pd.DataFrame({"path": [f"img/{i:03d}.jpg" for i in range(n)],
                          "label": [f"c{i % 3}" for i in range(n)]})
    return rng.normal(size=(n, d)).astype(np.float32), items


def fs():
    import s3fs

    return s3fs.S3FileSystem(client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})


def names(url: str) -> list[str]:
    f = fs()
    f.invalidate_cache()
    return sorted(p.rsplit("/", 1)[-1] for p in f.ls(url[len("s3://"):]))


def flip_byte(url: str, name: str, at: int | bytes = -3) -> None:
    """Flip the lowest bit of one byte of an object (``at``: an offset, or the byte after
    the first occurrence of that text)."""
    f = fs()
    key = f"{url[len('s3://'):]}/{name}"
    data = bytearray(f.cat_file(key))
    if isinstance(at, bytes):
        at = data.index(at) + len(at)
    data[at] ^= 0x01
    f.pipe_file(key, bytes(data))


def test_store_on_s3_equals_the_local_store(s3, tmp_path):
    x, items = rows()
    local = write_store(tmp_path / "st", x, items, shard_rows=20)
    remote = write_store(f"{s3}/st", x, items, shard_rows=20)
    again = Store.open(f"{s3}/st")
    assert again.is_remote and again.root == f"{s3}/st" and again.local_root is None
    np.testing.assert_array_equal(again.vectors(), local.vectors())
    pd.testing.assert_frame_equal(again.items, local.items)
    assert again.content_id == local.content_id == remote.content_id
    # the rows read in place (what streamed mine workers read) are the same rows too
    ids = np.array([0, 19, 20, len(x) - 1, 5])
    np.testing.assert_array_equal(again.rows()[ids], local.rows()[ids])
    assert [s for s, _ in again.rows().blocks(16)] == [s for s, _ in local.rows().blocks(16)]
    # every object carries the writer's token; no temp objects, no lock object
    listed = names(f"{s3}/st")
    assert listed[-1] == "manifest.json" and len(listed) == 5
    token = listed[0].split("-")[-1].split(".")[0]
    assert all(token in n for n in listed[:-1]) and len(token) == 8


def test_existing_store_needs_force_and_force_removes_the_old_objects(s3):
    x, items = rows()
    write_store(f"{s3}/st", x, items, shard_rows=20)
    old = names(f"{s3}/st")
    with pytest.raises(PairkitError, match=r"store s3://.*/st exists; pass --force"):
        write_store(f"{s3}/st", x[:10], items[:10])
    write_store(f"{s3}/st", x[:10], items[:10], force=True)
    new = names(f"{s3}/st")
    assert not set(old) - {"manifest.json"} & set(new)
    assert len(new) == 3 and Store.open(f"{s3}/st").count == 10


def test_a_prefix_of_other_objects_is_refused(s3):
    """Mutation audit 4a (RS2): a new store is not written among objects that are not a
    pairkit store's (nothing is put there, even with --force)."""
    fs().pipe_file(f"{s3[len('s3://'):]}/mixed/notes.txt", b"mine")
    x, items = rows(10)
    for force in (False, True):
        with pytest.raises(PairkitError, match=r"output s3://.*/mixed holds objects that are "
                                               r"not a pairkit store \(notes\.txt\)"):
            write_store(f"{s3}/mixed", x, items, force=force)
    assert names(f"{s3}/mixed") == ["notes.txt"]


@pytest.mark.parametrize("target", ["shard", "items", "manifest"])
def test_a_flipped_byte_is_refused(s3, target):
    x, items = rows()
    st = write_store(f"{s3}/st", x, items, shard_rows=20)
    name = {"shard": st.shards[1].file, "items": st.manifest["items"]["file"],
            "manifest": "manifest.json"}[target]
    flip_byte(f"{s3}/st", name, at=-3 if target != "manifest" else b'"created": "')
    with pytest.raises(StoreError, match="checksum mismatch"):
        Store.open(f"{s3}/st")


def test_opened_without_verify_reads_each_object_when_first_used(s3, tmp_path, monkeypatch):
    """``Store.open(url, verify=False)`` (a Ray run's driver, a worker): the manifest
    only, the item table when first read (whole, verified then), the shards' rows by
    byte ranges (never a shard whole: tests/core/test_ranged_shard.py); the same rows and
    items as the store read whole."""
    import pairkit.core.remote_store as remote_store

    x, items = rows()
    local = write_store(tmp_path / "st", x, items, shard_rows=20)
    write_store(f"{s3}/st", x, items, shard_rows=20)
    fetched: list[str] = []
    read = remote_store.read_bytes

    def counted(url, **kw):
        fetched.append(url.rsplit("/", 1)[-1])
        return read(url, **kw)

    monkeypatch.setattr(remote_store, "read_bytes", counted)
    lazy = Store.open(f"{s3}/st", verify=False)
    assert fetched == [] and lazy.count == len(x) and lazy.content_id == local.content_id
    ids = np.array([21, 25, 39])
    np.testing.assert_array_equal(lazy.rows()[ids], local.rows()[ids])
    np.testing.assert_array_equal(lazy.rows()[np.array([0, 45, 20])],
                                  local.rows()[np.array([0, 45, 20])])
    np.testing.assert_array_equal(lazy.vectors(), local.vectors())
    assert [s for s, _ in lazy.iter_blocks(16)] == [s for s, _ in local.iter_blocks(16)]
    assert fetched == []  # no object fetched whole
    pd.testing.assert_frame_equal(lazy.items, local.items)
    assert fetched == [lazy.manifest["items"]["file"]]
    # a damaged shard is refused when it is read, in one line
    flip_byte(f"{s3}/st", lazy.shards[2].file)
    again = Store.open(f"{s3}/st", verify=False)
    with pytest.raises(StoreError, match="checksum mismatch.*rerun the command"):
        again.rows()[np.array([41])]


def test_two_writers_creating_one_store_one_commits(s3):
    """Both find no store and write their shards; the first manifest wins, the second
    writer's conditional write fails: one line, its objects removed, the store intact."""
    x, items = rows()
    url = f"{s3}/st"
    from pairkit.core.store_writer import prepare_store_dir

    prepare_store_dir(url, force=False)
    a = StoreWriter.create(url, 8, commit=False)
    prepare_store_dir(url, force=False)
    b = StoreWriter.create(url, 8, commit=False)
    a.add_shard(x[:20], items[:20])
    b.add_shard(x[20:], items[20:])
    a.commit()
    with pytest.raises(PairkitError, match=r"^store s3://.*/st was committed by another "
                                           r"writer while this one was writing"):
        b.commit()
    st = Store.open(url)
    assert st.count == 20
    np.testing.assert_allclose(st.vectors(), x[:20] / np.linalg.norm(x[:20], axis=1,
                                                                      keepdims=True),
                               atol=1e-3)
    assert all(a.token in n for n in names(url) if n != "manifest.json")


def test_two_writers_appending_one_commits(s3):
    x, items = rows()
    url = f"{s3}/st"
    write_store(url, x[:10], items[:10])
    a, b = StoreWriter.resume(url), StoreWriter.resume(url)
    a.append(x[10:30], items[10:30])
    with pytest.raises(PairkitError, match="committed by another writer"):
        b.append(x[30:], items[30:])
    a.append(x[30:], items[30:])  # the winner goes on
    st = Store.open(url)
    assert st.count == 50
    assert list(st.items["path"]) == list(items["path"])
    assert not any(b.token in n for n in names(url))


def test_errors_list_on_s3(s3):
    x, items = rows(5)
    url = f"{s3}/st"
    from pairkit.core.store_writer import prepare_store_dir

    prepare_store_dir(url, force=False)
    w = StoreWriter.create(url, 8)
    assert w.set_errors([{"path": "bad.jpg", "reason": "not an image"}])
    w.append(x, items)
    assert Store.open(url).read_errors() == [{"path": "bad.jpg", "reason": "not an image"}]
    assert w.set_errors([{"path": "bad.jpg", "reason": "x"}, {"path": "b2.jpg", "reason": "y"}])
    w.commit()
    assert len(Store.open(url).read_errors()) == 2
    assert sum(n.startswith("errors-") for n in names(url)) == 1  # the old list removed
    # mutation audit 4a (RS6, RS4): a list of as many records but other content is new; the
    # same list again is not; two lists put before one commit leave one object
    assert not w.set_errors([{"path": "bad.jpg", "reason": "x"}, {"path": "b2.jpg", "reason": "y"}])
    assert w.set_errors([{"path": "bad.jpg", "reason": "x"}, {"path": "b3.jpg", "reason": "z"}])
    assert w.set_errors([{"path": "c.jpg", "reason": "x"}, {"path": "b3.jpg", "reason": "z"}])
    w.commit()
    assert Store.open(url).read_errors() == [{"path": "c.jpg", "reason": "x"},
                                             {"path": "b3.jpg", "reason": "z"}]
    assert sum(n.startswith("errors-") for n in names(url)) == 1


def test_half_written_and_missing_stores(s3):
    with pytest.raises(StoreError, match=r"is not a pairkit store: no manifest.json"):
        Store.open(f"{s3}/nothing")
    fs().pipe_file(f"{s3[5:]}/half/embeddings-00000-0a0b0c0d.npy", b"x")
    with pytest.raises(StoreError, match="is half-written"):
        Store.open(f"{s3}/half")


@pytest.mark.parametrize("suffix", ["pairs.parquet", "pairs.csv", "pairs.jsonl", "pairs/"])
def test_tables_on_s3(s3, suffix):
    from pairkit.core.tables import read_table, write_table

    df = pd.DataFrame({"anchor_id": [0, 0, 1, 2], "negative_id": [3, 4, 5, 6],
                       "anchor_path": ["a", "a", "b", "é"], "score": [0.5, 0.25, 1.0, -1.0]})
    url = f"{s3}/{suffix}"
    write_table(df, url, part_rows=[2, 1, 1] if suffix.endswith("/") else None)
    pd.testing.assert_frame_equal(read_table(url), df, check_dtype=False)
    with pytest.raises(PairkitError, match="exists; pass --force"):
        write_table(df, url)
    write_table(df.iloc[:2], url, force=True)
    assert len(read_table(url)) == 2
    if suffix.endswith("/"):
        listed = names(url.rstrip("/"))
        assert len(listed) == 2 and "_pairkit_parts.json" in listed  # old parts removed
        flip_byte(url.rstrip("/"), next(n for n in listed if n.startswith("part-")))
        with pytest.raises(PairkitError, match="checksum mismatch"):
            read_table(url)


def test_urls_never_become_local_folders(s3, tmp_path, monkeypatch):
    """What pathlib makes of a URL (``s3:/bucket``) is refused, not written; a scheme
    without a conditional write (memory://) or without its package (gs://) is refused
    in one line."""
    from pairkit.core.tables import write_table

    monkeypatch.chdir(tmp_path)
    x, items = rows(5)
    with pytest.raises(UsageError, match=r"looks like the URL s3://bucket/st turned into a "
                                         "local path"):
        write_store(Path("s3://bucket/st"), x, items)
    with pytest.raises(UsageError, match="looks like the URL"):
        Store.open(Path("s3://bucket/st"))
    with pytest.raises(UsageError, match="looks like the URL"):
        write_table(pd.DataFrame({"a": [1]}), Path("s3://bucket/t.parquet"))
    with pytest.raises(PairkitError, match=r"writing a store to memory:// is not supported"):
        write_store("memory://bucket/st", x, items)
    with pytest.raises(PairkitError, match=r"^gs://b/st.*: Please install gcsfs"):
        Store.open("gs://b/st")
    assert list(tmp_path.iterdir()) == []


def test_resume_removes_only_stale_unnamed_objects(s3, monkeypatch):
    """Mutation audit 4a (RS5): an unnamed object of a live writer (put just now, not yet
    committed) survives another writer's resume; one older than STALE_SECONDS goes."""
    from pairkit.core import remote_store
    from pairkit.core.remote_store import RemoteStoreWriter

    x, items = rows(10)
    write_store(f"{s3}/st", x, items)
    live = "embeddings-00007-0badcafe.npy"
    fs().pipe_file(f"{s3[len('s3://'):]}/st/{live}", b"pending")
    RemoteStoreWriter.resume(f"{s3}/st").close()
    assert live in names(f"{s3}/st")
    monkeypatch.setattr(remote_store, "STALE_SECONDS", -60)  # everything unnamed is old
    RemoteStoreWriter.resume(f"{s3}/st").close()
    assert live not in names(f"{s3}/st") and Store.open(f"{s3}/st").count == 10


def test_open_retries_when_a_writer_commits_during_the_read(s3, monkeypatch):
    """Mutation audit 4a (RS7): a shard that fails to read because a writer replaced the
    store meanwhile (new manifest): the open takes the new snapshot instead of failing."""
    from pairkit.core import remote_store

    x, items = rows(20)
    url = f"{s3}/st"
    write_store(url, x, items)
    real, calls = remote_store.shard_array, []

    def replaced_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # the writer commits a new store as the first shard is read
            write_store(url, x[:7], items[:7], force=True)
            raise StoreError("shard missing")
        return real(*args, **kwargs)

    monkeypatch.setattr(remote_store, "shard_array", replaced_once)
    st = Store.open(url)
    assert st.count == 7 and len(calls) >= 2
    np.testing.assert_allclose(st.vectors(), Store.open(url).vectors())
