"""The store: round trip, readable without pairkit, validation of damaged stores,
format-1 stores read and upgraded."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pairkit.core.store import MANIFEST, Store, l2_normalize
from pairkit.core.store_writer import StoreWriter, write_store
from pairkit.errors import PairkitError, StoreError


def _items(n: int) -> pd.DataFrame:
    return pd.DataFrame({"path": [f"img{i}.jpg" for i in range(n)]})


def test_round_trip_normalises_and_fills_defaults(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 8)).astype(np.float32)
    store = write_store(tmp_path / "s", x, _items(10), dtype="float32")
    np.testing.assert_allclose(store.vectors(), l2_normalize(x), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(store.vectors(), axis=1), 1.0, rtol=1e-6)
    items = store.items
    assert list(items.columns) == ["id", "path", "source", "view", "label", "file_sha256"]
    assert items["id"].tolist() == list(range(10))
    assert (items["source"] == items["path"]).all()
    assert (items["view"] == 0).all()
    assert items["label"].isna().all()
    assert store.labels() is None


def test_readable_with_numpy_and_pandas_only(tmp_path):
    """docs/formats.md's recipe, including the checksums, with numpy, pandas and hashlib."""
    import hashlib

    x = np.eye(4, dtype=np.float32)
    write_store(tmp_path / "s", x, _items(4), dtype="float16", shard_rows=3)
    root = tmp_path / "s"
    manifest = json.loads((root / MANIFEST).read_text())
    assert manifest["format_version"] == 2
    arrays = [np.load(root / s["file"]) for s in manifest["shards"]]
    emb = np.concatenate(arrays)
    assert emb.dtype == np.float16 and emb.shape == (4, 4)
    items = pd.read_parquet(root / manifest["items"]["file"])
    assert len(items) == manifest["count"] == 4
    for rec in [*manifest["shards"], manifest["items"]]:
        data = (root / rec["file"]).read_bytes()
        assert len(data) == rec["bytes"] and hashlib.sha256(data).hexdigest() == rec["sha256"]
    assert [(s["start"], s["rows"]) for s in manifest["shards"]] == [(0, 3), (3, 1)]
    body = {k: v for k, v in manifest.items() if k != "self_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert hashlib.sha256(canonical.encode()).hexdigest() == manifest["self_sha256"]


def test_several_shards_iter_blocks_match_vectors(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(25, 6)).astype(np.float32)
    store = write_store(tmp_path / "s", x, _items(25), dtype="float32", shard_rows=7)
    assert len(store.shards) == 4
    blocks = np.concatenate([b for _, b in store.iter_blocks(rows=3)])
    np.testing.assert_array_equal(blocks, store.vectors())
    starts = [s for s, _ in store.iter_blocks(rows=5)]
    assert starts == [0, 5, 7, 12, 14, 19, 21]


def test_cached_vectors_are_read_only_and_torch_reads_them_quietly(tmp_path):
    """Every later call and search of a store object reads the one cached array: a caller
    writing into it would change what the next search sees, so it is read-only; the torch
    paths that wrap it (exact search, training) do so without torch's writable warning."""
    import warnings

    from pairkit.index.torch_search import TorchFlatIndex

    rng = np.random.default_rng(2)
    store = write_store(tmp_path / "s", rng.normal(size=(12, 4)), _items(12), dtype="float32")
    v = store.vectors()
    assert np.shares_memory(v, store.vectors()) and not v.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        v[0, 0] = 5.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores, ids = TorchFlatIndex(v, device="cpu").search(v[:3], 2)
    assert ids[:, 0].tolist() == [0, 1, 2]
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-6)


def test_callers_can_not_change_the_cached_items_or_vectors(tmp_path):
    """Found by a bug hunt (2026-12-06): ``Store.items`` was the cached table every later
    call reads, so a caller's edit (a label, a path) changed later mining, loaders and
    searches; and ``Store.vectors()`` was the cached array itself, whose writeable flag a
    caller could switch back on and zero the cache."""
    import warnings

    rng = np.random.default_rng(3)
    store = write_store(tmp_path / "s", rng.normal(size=(6, 4)), _items(6), dtype="float32")
    want_items, want_vectors = store.items.copy(), store.vectors().copy()
    items = store.items
    items["label"] = "all-same"
    items.loc[0, "path"] = "HACKED.jpg"
    with warnings.catch_warnings():  # pandas 3: chained assignment never works, it warns
        warnings.simplefilter("ignore")
        store.items.loc[1, "source"] = "HACKED"
        store.items["view"] = 7
    pd.testing.assert_frame_equal(store.items, want_items)
    assert store.labels() is None
    v = store.vectors()
    with pytest.raises(ValueError):
        v.flags.writeable = True
    np.testing.assert_array_equal(store.vectors(), want_vectors)


def test_the_stores_own_column_reads_copy_no_table_on_pandas_2(tmp_path, monkeypatch):
    """Failed before: without copy-on-write (pandas 2's default) ``labels()``,
    ``label_codes()``, ``source_codes()`` and ``has_labels`` each read ``Store.items``,
    a deep copy of the whole item table (two for ``labels()``); they read the cached table
    now, and what they return is new (a caller's edit changes nothing later)."""
    import pairkit.core.store as store_module

    items = _items(6).assign(label=["a", "b", None, "a", "b", "a"],
                             source=["s0", "s0", "s1", "s2", "s2", "s3"])
    store = write_store(tmp_path / "s", np.eye(6, dtype=np.float32), items)
    monkeypatch.setattr(store_module, "_copy_on_write", lambda: False)  # pandas 2's way
    copies = []
    real = pd.DataFrame.copy

    def counted(self, deep=True):  # noqa: ANN001, ANN202 - DataFrame.copy's spy
        copies.append(deep)
        return real(self, deep=deep)

    monkeypatch.setattr(pd.DataFrame, "copy", counted)
    assert store.has_labels
    labels = store.labels()
    assert labels.tolist() == ["a", "b", None, "a", "b", "a"]
    assert store.label_codes().tolist() == [0, 1, -1, 0, 1, 0]
    assert store.source_codes().tolist() == [0, 0, 1, 2, 2, 3]
    assert [c.to_pylist() for c in store.item_columns("view")] == [[0] * 6]
    assert copies == []  # no copy of the table
    labels[0] = "changed"
    assert store.labels()[0] == "a" and store.items["label"][0] == "a"
    assert copies == [True]  # Store.items: still the table's deep copy here


def test_content_id_stable_across_manifest_rewrites(tmp_path):
    x = np.eye(3, dtype=np.float32)
    store = write_store(tmp_path / "s", x, _items(3))
    before = store.content_id
    writer = StoreWriter.resume(tmp_path / "s")
    writer.update(note="rewritten")
    assert Store.open(tmp_path / "s").content_id == before


def test_content_id_tells_stores_of_other_rows_apart(tmp_path):
    """Two stores of as many rows but other vectors have other content ids (a pair table
    of one is refused on the other); the same rows written again have the same one
    (hunt 3b: an id of the row count alone survived)."""
    x = np.eye(3, dtype=np.float32)
    a = write_store(tmp_path / "a", x, _items(3))
    b = write_store(tmp_path / "b", x[::-1].copy(), _items(3))
    again = write_store(tmp_path / "c", x, _items(3))
    assert a.content_id != b.content_id
    assert a.content_id == again.content_id


def test_missing_store_and_not_a_store(tmp_path):
    with pytest.raises(StoreError, match="not found"):
        Store.open(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(StoreError, match="not a pairkit store"):
        Store.open(tmp_path / "plain")


def test_half_written_store(tmp_path):
    write_store(tmp_path / "s", np.eye(3, dtype=np.float32), _items(3))
    (tmp_path / "s" / MANIFEST).unlink()
    with pytest.raises(StoreError, match="half-written"):
        Store.open(tmp_path / "s")


def test_checksum_mismatch(tmp_path):
    write_store(tmp_path / "s", np.eye(3, dtype=np.float32), _items(3), dtype="float32")
    shard = tmp_path / "s" / "embeddings-00000.npy"
    arr = np.load(shard)
    arr[0, 0] = 0.5
    np.save(shard, arr)
    with pytest.raises(StoreError, match="checksum mismatch"):
        Store.open(tmp_path / "s")
    Store.open(tmp_path / "s", verify=False)  # shape still fits


def _edit_manifest(root, change, reseal=True):
    """Change the manifest as a careless tool would (and re-seal it, as a deliberate one)."""
    from pairkit.core.integrity import seal

    m = json.loads((root / MANIFEST).read_text())
    change(m)
    (root / MANIFEST).write_text(json.dumps(seal(m) if reseal else m))


def test_row_count_mismatch(tmp_path):
    write_store(tmp_path / "s", np.eye(3, dtype=np.float32), _items(3))
    root = tmp_path / "s"
    name = json.loads((root / MANIFEST).read_text())["items"]["file"]
    _items(2).assign(id=[0, 1]).to_parquet(root / name)
    with pytest.raises(StoreError, match="item table .* is .* bytes, manifest says"):
        Store.open(root)


def test_manifest_count_mismatch(tmp_path):
    write_store(tmp_path / "s", np.eye(3, dtype=np.float32), _items(3))
    root = tmp_path / "s"
    _edit_manifest(root, lambda m: m.update(count=5), reseal=False)
    with pytest.raises(StoreError, match="manifest.json checksum mismatch"):
        Store.open(root)
    _edit_manifest(root, lambda m: m.update(count=5))
    with pytest.raises(StoreError, match="manifest says 5"):
        Store.open(root)


def test_refuses_to_overwrite_without_force(tmp_path):
    from pairkit.errors import PairkitError

    write_store(tmp_path / "s", np.eye(3, dtype=np.float32), _items(3))
    with pytest.raises(PairkitError, match="--force"):
        write_store(tmp_path / "s", np.eye(3, dtype=np.float32), _items(3))
    write_store(tmp_path / "s", 2 * np.eye(3, dtype=np.float32), _items(3), force=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(PairkitError, match="not a pairkit store"):
        write_store(tmp_path / "other", np.eye(3, dtype=np.float32), _items(3), force=True)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_force_removes_only_pairkit_s_own_temp_files(tmp_path):
    """Found by a bug hunt (2026-12-06): --force removed every hidden ``*.tmp`` file of the
    store folder, a user's ``.draft.tmp`` too; only temps of pairkit's own files go."""
    root = tmp_path / "s"
    write_store(root, np.eye(3, dtype=np.float32), _items(3))
    (root / ".draft.tmp").write_text("my draft")
    (root / ".embeddings-00009.npy.abcd1234.tmp").write_bytes(b"killed")
    (root / "notes.txt").write_text("keep")
    write_store(root, 2 * np.eye(3, dtype=np.float32), _items(3), force=True)
    names = sorted(p.name for p in root.iterdir())
    assert ".draft.tmp" in names and "notes.txt" in names
    assert ".embeddings-00009.npy.abcd1234.tmp" not in names
    assert Store.open(root).count == 3


@pytest.mark.parametrize("name", ["items.parquet", "errors.jsonl"])
def test_a_folder_of_a_users_generic_file_is_not_a_killed_writers(tmp_path, name):
    """items.parquet and errors.jsonl are names pairkit writes, but common ones: a folder
    holding only such a file of the user's was taken for a killed writer's leftovers and
    emptied without --force. A killed writer leaves a shard or a versioned item table."""
    from pairkit.errors import PairkitError

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / name).write_bytes(b"the user's own table")
    for force in (False, True):
        with pytest.raises(PairkitError, match="not a pairkit store"):
            write_store(folder, np.eye(3, dtype=np.float32), _items(3), force=force)
    assert (folder / name).read_bytes() == b"the user's own table"
    # a killed writer's files (a shard, the versioned items, errors.jsonl) are cleared
    killed = tmp_path / "killed"
    killed.mkdir()
    np.save(killed / "embeddings-00000.npy", np.eye(3, dtype=np.float16))
    _items(3).to_parquet(killed / "items-00001.parquet")
    (killed / "errors.jsonl").write_text("")
    write_store(killed, np.eye(3, dtype=np.float32), _items(3))
    assert Store.open(killed).count == 3 and not (killed / "errors.jsonl").exists()


def test_resume_removes_what_the_manifest_never_committed(tmp_path):
    """An append killed after its shard and item table but before the manifest leaves
    files the manifest does not name: readers never see them, resume removes them."""
    root = tmp_path / "s"
    write_store(root, np.eye(3, dtype=np.float32), _items(3))
    committed = json.loads((root / MANIFEST).read_text())["items"]["file"]
    np.save(root / "embeddings-00001.npy", np.eye(3, dtype=np.float16))
    pd.concat([pd.read_parquet(root / committed)] * 2).to_parquet(root / "items-00002.parquet")
    (root / ".manifest.json.abcd1234.tmp").write_text("{half")
    assert Store.open(root).count == 3
    with StoreWriter.resume(root) as writer:
        assert len(writer.items) == 3
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [MANIFEST, "embeddings-00000.npy", committed])
    assert Store.open(root).count == 3


def _v1_store(root, x, items):
    """A store as pairkit wrote it before format 2 (fixed items.parquet, no item checksum)."""
    from pairkit.core.items import normalize_items
    from pairkit.core.store import sha256_file

    root.mkdir()
    np.save(root / "embeddings-00000.npy", l2_normalize(x).astype(np.float16))
    normalize_items(items).to_parquet(root / "items.parquet", index=False)
    (root / "errors.jsonl").write_text('{"path": "bad.jpg", "reason": "empty file"}\n')
    manifest = {"format": "pairkit-store", "format_version": 1, "dim": x.shape[1],
                "count": len(x), "dtype": "float16", "normalized": True,
                "encoder": {"name": "old"}, "shards": [{
                    "file": "embeddings-00000.npy", "rows": len(x),
                    "sha256": sha256_file(root / "embeddings-00000.npy")}]}
    (root / MANIFEST).write_text(json.dumps(manifest))


def test_item_ids_out_of_row_order_are_refused(tmp_path):
    """A format-1 store (no item checksum) whose item table's ids are not 0..N-1 in row
    order is refused: its rows would be read as other items (hunt 3b: dropping the check
    survived)."""
    from pairkit.core.items import normalize_items

    root = tmp_path / "old"
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    _v1_store(root, x, _items(3))
    normalize_items(_items(3)).assign(id=[1, 0, 2]).to_parquet(root / "items.parquet",
                                                                 index=False)
    with pytest.raises(StoreError, match=r"ids are not 0\.\.2"):
        _ = Store.open(root).items


def test_a_shard_of_another_dtype_than_the_manifest_is_refused(tmp_path):
    """A format-1 store (no shard sizes in its manifest) whose shard holds float32 where
    the manifest says float16, its checksum matching: refused at open by the .npy
    header, not read as the manifest's dtype (hunt 3b: dropping the check survived)."""
    from pairkit.core.store import sha256_file

    root = tmp_path / "old"
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    _v1_store(root, x, _items(3))
    np.save(root / "embeddings-00000.npy", l2_normalize(x))
    m = json.loads((root / MANIFEST).read_text())
    m["shards"][0]["sha256"] = sha256_file(root / "embeddings-00000.npy")
    (root / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(StoreError, match="embeddings-00000.npy is float32, manifest says "
                                         "float16"):
        Store.open(root)


def test_format_1_is_read_and_upgraded_on_write(tmp_path):
    root = tmp_path / "old"
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    _v1_store(root, x, _items(5))
    old = Store.open(root)
    assert old.format_version == 1 and old.count == 5
    assert old.items["path"].tolist() == [f"img{i}.jpg" for i in range(5)]
    content_id = old.content_id
    # an interrupted format-1 append left item rows the manifest never committed
    pd.concat([pd.read_parquet(root / "items.parquet")] * 2).to_parquet(root / "items.parquet")
    with StoreWriter.resume(root) as writer:
        writer.append(np.ones((2, 4), np.float32), _items(2))
    new = Store.open(root)
    assert new.format_version == 2 and new.count == 7
    assert not (root / "items.parquet").exists()
    assert new.items["id"].tolist() == list(range(7))
    np.testing.assert_allclose(new.vectors()[:5], old.vectors(), atol=1e-3)
    assert [s.start for s in new.shards] == [0, 5]
    assert new.read_errors() == [{"path": "bad.jpg", "reason": "empty file"}]
    assert Store(root, old.manifest).content_id == content_id


def test_new_error_records_never_change_the_committed_errors_file(tmp_path):
    """Found by a bug hunt (hunt-n 4): set_errors replaced errors.jsonl in place while the
    committed manifest still named it with the old sha256, so ``info`` called the store
    damaged while embed ran, and after a kill until the next writer. A new list is written
    under a new name at the next commit; the old file goes after that commit."""
    from pairkit.core.store_writer import prepare_store_dir

    root = prepare_store_dir(tmp_path / "s", force=False)
    first = [{"path": "a.jpg", "reason": "empty file"}]
    second = [*first, {"path": "b.jpg", "reason": "not an image"}]
    writer = StoreWriter.create(root, 3, commit=False)
    writer.set_errors(first)
    writer.append(np.eye(3, dtype=np.float32), _items(3))
    old_file = json.loads((root / MANIFEST).read_text())["errors"]["file"]
    reader = Store.open(root)  # holds the snapshot that names the first list
    assert writer.set_errors(second)
    assert Store.open(root).read_errors() == first  # (a kill here: the store reads)
    writer.append(np.eye(3, dtype=np.float32), _items(3))
    writer.close()
    assert reader.read_errors() == first
    new = Store.open(root)
    assert new.read_errors() == second and new.manifest["errors"]["file"] != old_file
    assert not (root / old_file).exists()
    with StoreWriter.resume(root) as writer:
        assert writer.set_errors([]) and Store.open(root).read_errors() == second
        writer.commit()
    assert Store.open(root).read_errors() == []
    assert not [p.name for p in root.iterdir() if p.name.startswith("errors")]


def _saved_index(root, kind="ivf"):
    """What ``pairkit index`` leaves in a store: ``index/<kind>.faiss`` and ``.json``."""
    (root / "index").mkdir(exist_ok=True)
    (root / "index" / f"{kind}.faiss").write_bytes(b"faiss bytes")
    (root / "index" / f"{kind}.json").write_text("{}")


@pytest.mark.parametrize("force", [False, True])
def test_a_store_that_lost_its_manifest_but_holds_an_index_is_written_again(tmp_path, force):
    """Found by a bug hunt (hunt-n 2): a store with a saved index that lost its manifest
    (an interrupted --force) was "a folder that is not a pairkit store" for every writer,
    --force included: index/ was not pairkit's. An index/ of only pairkit's index files
    is, and it goes with the other leftovers (it indexed rows that are gone)."""
    from pairkit.errors import PairkitError

    root = tmp_path / "s"
    write_store(root, np.eye(3, dtype=np.float32), _items(3))
    _saved_index(root)
    (root / "index" / ".ivf.faiss.abcd1234.tmp").write_bytes(b"killed")
    (root / MANIFEST).unlink()
    write_store(root, 2 * np.eye(3, dtype=np.float32), _items(3), force=force)
    assert Store.open(root).count == 3 and not (root / "index").exists()
    # an index/ holding a user's file is not pairkit's: refused, and kept
    (root / MANIFEST).unlink()
    _saved_index(root)
    (root / "index" / "notes.txt").write_text("mine")
    with pytest.raises(PairkitError, match="not a pairkit store"):
        write_store(root, np.eye(3, dtype=np.float32), _items(3), force=True)
    assert (root / "index" / "notes.txt").read_text() == "mine"


def _files(root) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}


@pytest.mark.parametrize("where", ["shard", "items", "manifest"])
@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_force_keeps_the_old_store_until_the_new_one_commits(tmp_path, monkeypatch, where,
                                                             failure):
    """Found by a bug hunt (hunt-n 1): write_store (import, project) with force removed the
    old store before it wrote the new one, so Ctrl-C, a kill or a full disk in between
    lost it. The new store's files now take names the old one's don't have, the new
    manifest replaces the old one atomically, and only then do the old files go."""
    import errno

    from pairkit.core import atomic, store_writer

    root = tmp_path / "s"
    old = write_store(root, np.eye(4, dtype=np.float32), _items(4), shard_rows=3)
    _saved_index(root)
    before = _files(root)
    real_path = atomic.atomic_path

    def failing(target, *args, **kwargs):
        name = str(target).rsplit("/", 1)[-1]
        if name.startswith({"shard": "embeddings-", "items": "items-",
                            "manifest": MANIFEST}[where]):
            raise failure(errno.ENOSPC, "No space left on device") \
                if failure is OSError else failure
        return real_path(target, *args, **kwargs)

    monkeypatch.setattr(store_writer, "atomic_path", failing)
    monkeypatch.setattr(atomic, "atomic_path", failing)  # atomic_open's
    with pytest.raises(failure):
        write_store(root, 2 * np.eye(4, 5, dtype=np.float32), _items(4), force=True)
    monkeypatch.undo()
    assert _files(root) == before and (root / "index" / "ivf.json").exists()
    assert Store.open(root).count == 4 and Store.open(root).dim == 4
    # the next writer takes the folder: the new store replaces the old one whole
    new = write_store(root, 2 * np.eye(4, 5, dtype=np.float32), _items(4), force=True)
    assert new.dim == 5 and Store.open(root).dim == 5
    named = {s.file for s in new.shards} | {new.manifest["items"]["file"], MANIFEST}
    assert set(_files(root)) == named and not (root / "index").exists()
    # a reader of the old snapshot still reads it whole
    np.testing.assert_allclose(old.vectors(), np.eye(4), atol=1e-3)
    assert old.items["path"].tolist() == [f"img{i}.jpg" for i in range(4)]


def test_normalize_items_fills_sources_views_and_text_cells() -> None:
    """Mutation audit 4a (IT1-IT4): a missing or empty source is the path (else every such
    item is one source: positives of each other under ``instance``); ids start at
    ``start_id``; a negative view is refused; an empty label or hash cell is null."""
    from pairkit.core.items import normalize_items

    items = pd.DataFrame({"path": ["a.jpg", "b.jpg", "c.jpg"], "source": ["s", "", None],
                          "view": [0, 1, 2], "label": ["x", "", None],
                          "file_sha256": ["", "ff", None]})
    out = normalize_items(items, start_id=5)
    assert out["id"].tolist() == [5, 6, 7]
    assert out["source"].tolist() == ["s", "b.jpg", "c.jpg"]
    assert out["view"].tolist() == [0, 1, 2]
    assert out["label"].isna().tolist() == [False, True, True]
    assert out["file_sha256"].isna().tolist() == [True, False, True]
    with pytest.raises(PairkitError, match=r"'view' must hold whole numbers 0-32767: row 1 "
                                           r"holds '-1'"):
        normalize_items(items.assign(view=[0, -1, 2]))
