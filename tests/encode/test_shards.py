"""The shard buffer: rows in arrival order, shards cut at multiples of --shard-rows, one
copy to the host for a run of device tensors."""

from __future__ import annotations

import numpy as np
import torch

from pairkit.encode.batches import EncodedBatch
from pairkit.encode.shards import ShardBuffer, aligned_cut


def _batch(start: int, rows: int, tensor: bool = True) -> EncodedBatch:
    vectors = np.arange(start, start + rows, dtype=np.float32)[:, None] * np.ones((1, 3),
                                                                             np.float32)
    items = [{"path": f"p{start + r}"} for r in range(rows)]
    return EncodedBatch(torch.from_numpy(vectors) if tensor else vectors, items,
                        [{"path": "bad", "reason": "x"}], images=rows, on_device=1)


def test_aligned_cut_by_hand() -> None:
    assert aligned_cut(0, 3, 4) == 0 and aligned_cut(0, 4, 4) == 4
    assert aligned_cut(2, 7, 4) == 6  # 2 to fill the store's last shard, then one of 4
    assert aligned_cut(2, 7, 4, one=True) == 2 and aligned_cut(0, 3, 4, one=True) == 3


def test_shards_end_at_multiples_and_keep_the_rest() -> None:
    buf = ShardBuffer()
    for start, rows in ((0, 3), (3, 5), (8, 1)):
        buf.add(_batch(start, rows))
    assert buf.pending() == 9 and buf.images == 9 and len(buf.errors) == 3
    shards = buf.take_shards(count=2, shard_rows=4, whole=False)  # store holds 2 rows
    assert [len(items) for _, items in shards] == [2, 4]
    np.testing.assert_array_equal(np.concatenate([v for v, _ in shards])[:, 0], np.arange(6))
    assert buf.pending() == 3
    buf.add(_batch(9, 1, tensor=False))  # rows kept back, then new ones: order kept
    (rest, items), = buf.take_shards(count=8, shard_rows=4)
    np.testing.assert_array_equal(rest[:, 0], np.arange(6, 10))
    assert [i["path"] for i in items] == [f"p{i}" for i in range(6, 10)]
    assert buf.pending() == 0 and buf.rows == 10


def test_take_all() -> None:
    buf = ShardBuffer()
    assert buf.take()[1] == []
    buf.add(_batch(0, 2))
    buf.add(EncodedBatch(None, [], [{"path": "x", "reason": "y"}]))
    vectors, items = buf.take()
    assert vectors.dtype == np.float32 and vectors.shape == (2, 3) and len(items) == 2
    assert len(buf.errors) == 2 and buf.pending() == 0


def test_a_full_shard_holds_whole_images() -> None:
    """The local loop's full shard: --shard-rows rounded down to whole images (a multiple
    of --views), at least one image (hunt 3b: --shard-rows as given survived; a shard of
    10 rows at 3 views would end inside an image)."""
    from pairkit.encode.shards import shard_unit

    assert shard_unit(10, 3) == 9 and shard_unit(12, 3) == 12
    assert shard_unit(2, 3) == 3 and shard_unit(7, 1) == 7
