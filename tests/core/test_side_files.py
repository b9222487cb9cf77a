"""A run's temporary files beside its parts (pairkit/core/side_files.py)."""

from __future__ import annotations

import numpy as np

from pairkit.core.side_files import read_arrays, remove_objects, side_path, write_arrays
from pairkit.mine.ivf_parts import candidates_path
from pairkit.mine.mined_parts import mined_path
from pairkit.mine.stream_quantiles import keys_path


def test_one_naming_for_every_kind_of_file(tmp_path):
    # locally a leading dot (left out of a committed dataset); on object storage the
    # writer's token too (its abort removes what it put)
    assert side_path(tmp_path, "x-1", ".npz") == tmp_path / ".x-1.npz"
    assert side_path("s3://b/p", "x-1", ".npz", "tok") == "s3://b/p/.x-1-tok.npz"
    assert candidates_path(str(tmp_path), 2, 3).name == ".cand-00002-00003.npz"
    assert candidates_path("s3://b/p", 2, 3, "tok") == "s3://b/p/.cand-00002-00003-tok.npz"
    assert mined_path(str(tmp_path), 4).name == ".mined-00004.npz"
    assert keys_path(tmp_path, "pos", 5).name == ".pos-000005.keys"
    assert keys_path("s3://b/p", "pos", 5, "tok") == "s3://b/p/.pos-000005-tok.keys"


def test_arrays_round_trip_and_best_effort_removal(tmp_path, monkeypatch):
    path = side_path(tmp_path, "a", ".npz")
    want = {"ids": np.arange(5, dtype=np.int32), "scores": np.linspace(0, 1, 5)}
    write_arrays(path, want)
    got = read_arrays(path, ["scores", "ids"])
    assert list(got) == ["scores", "ids"]
    for name in want:
        assert got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name], want[name])
    import pairkit.core.remote as remote
    from pairkit.errors import PairkitError

    seen = []

    def remove(url):
        seen.append(url)
        raise PairkitError("gone already")

    monkeypatch.setattr(remote, "remove", remove)
    remove_objects(["s3://b/p/.a-t.npz", "s3://b/p/.b-t.npz"])  # each tried, none raises
    assert seen == ["s3://b/p/.a-t.npz", "s3://b/p/.b-t.npz"]
