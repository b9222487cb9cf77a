"""The mined positives of a parts run, one file per block (pairkit/mine/mined_parts.py)."""

from __future__ import annotations

import numpy as np

from pairkit.mine.mined_parts import MinedFiles, block_mined, mined_path, remove_mined, write_mined
from pairkit.mine.positives import MinedPositives


def mined(rows: list[int]) -> MinedPositives:
    r = np.asarray(rows, dtype=np.int64)
    return MinedPositives(r, 100 + np.arange(len(r)), np.linspace(0, 1, len(r), dtype=np.float32),
                          np.full(len(r), 0.5, np.float32), (r % 2).astype(np.uint8))


def test_each_block_reads_its_own_anchors_rows(tmp_path):
    # 10 anchors in blocks of 4: anchors 0-3, 4-7, 8-9; block 1 has none mined
    m = mined([0, 0, 2, 3, 8, 9, 9])
    files = write_mined(m, str(tmp_path), anchors=10, batch=4)
    assert isinstance(files, MinedFiles) and files.blocks == 3 and len(files) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".mined-00000.npz", ".mined-00001.npz", ".mined-00002.npz"]  # left out of a dataset
    for span, want in (((0, 4), slice(0, 4)), ((4, 8), slice(4, 4)), ((8, 10), slice(4, 7))):
        got = block_mined(files, span)
        for name in ("rows", "ids", "scores", "confidence", "codes"):
            a, b = getattr(got, name), getattr(m, name)[want]
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    assert block_mined(m, (0, 4)) is m and block_mined(None, (0, 4)) is None


def test_no_anchors_no_files(tmp_path):
    files = write_mined(mined([]), str(tmp_path), anchors=0, batch=4)
    assert files.blocks == 0 and not list(tmp_path.iterdir())


def test_remote_names_carry_the_token_and_are_removed(tmp_path, monkeypatch):
    """On object storage the objects are named with the writer's token (its abort removes
    them) and :func:`remove_mined` removes them by name (``remove`` recorded here; the
    whole run on the local S3 server: tests/distributed/test_ray.py, case ``rules``)."""
    assert str(mined_path("s3://b/pairs", 3, "abcd")) == "s3://b/pairs/.mined-00003-abcd.npz"
    removed = []
    import pairkit.core.remote as remote

    monkeypatch.setattr(remote, "remove", removed.append)
    remove_mined("s3://b/pairs", 2, "abcd")
    assert removed == ["s3://b/pairs/.mined-00000-abcd.npz", "s3://b/pairs/.mined-00001-abcd.npz"]
