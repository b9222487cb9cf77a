"""The store: round trip, readable without pairkit, validation of damaged stores."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pairkit.core.store import MANIFEST, Store, StoreWriter, l2_normalize, write_store
from pairkit.errors import StoreError


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
    x = np.eye(4, dtype=np.float32)
    write_store(tmp_path / "s", x, _items(4), dtype="float16")
    manifest = json.loads((tmp_path / "s" / MANIFEST).read_text())
    arrays = [np.load(tmp_path / "s" / s["file"]) for s in manifest["shards"]]
    emb = np.concatenate(arrays)
    assert emb.dtype == np.float16 and emb.shape == (4, 4)
    items = pd.read_parquet(tmp_path / "s" / "items.parquet")
    assert len(items) == manifest["count"] == 4


def test_several_shards_iter_blocks_match_vectors(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(25, 6)).astype(np.float32)
    store = write_store(tmp_path / "s", x, _items(25), dtype="float32", shard_rows=7)
    assert len(store.shards) == 4
    blocks = np.concatenate([b for _, b in store.iter_blocks(rows=3)])
    np.testing.assert_array_equal(blocks, store.vectors())
    starts = [s for s, _ in store.iter_blocks(rows=5)]
    assert starts == [0, 5, 7, 12, 14, 19, 21]


def test_content_id_stable_across_manifest_rewrites(tmp_path):
    x = np.eye(3, dtype=np.float32)
    store = write_store(tmp_path / "s", x, _items(3))
    before = store.content_id
    writer = StoreWriter.resume(tmp_path / "s")
    writer.update(note="rewritten")
    assert Store.open(tmp_path / "s").content_id == before


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


def test_row_count_mismatch(tmp_path):
    write_store(tmp_path / "s", np.eye(3, dtype=np.float32), _items(3))
    _items(2).assign(id=[0, 1]).to_parquet(tmp_path / "s" / "items.parquet")
    with pytest.raises(StoreError, match="row count mismatch"):
        Store.open(tmp_path / "s")


def test_manifest_count_mismatch(tmp_path):
    write_store(tmp_path / "s", np.eye(3, dtype=np.float32), _items(3))
    m = json.loads((tmp_path / "s" / MANIFEST).read_text())
    m["count"] = 5
    (tmp_path / "s" / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(StoreError, match="manifest says 5"):
        Store.open(tmp_path / "s")


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


def test_resume_drops_item_rows_the_manifest_never_committed(tmp_path):
    """An append interrupted after items.parquet but before the manifest: resume repairs it."""
    write_store(tmp_path / "s", np.eye(3, dtype=np.float32), _items(3))
    pd.concat([pd.read_parquet(tmp_path / "s" / "items.parquet")] * 2).to_parquet(
        tmp_path / "s" / "items.parquet")
    writer = StoreWriter.resume(tmp_path / "s")
    assert len(writer.items) == 3
    assert Store.open(tmp_path / "s").count == 3
