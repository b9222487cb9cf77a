"""dedup on stores of known vectors: with ``--against`` a leak is a pair across the stores
within the threshold, whatever the grouping would do with it, an exact copy is named as
one, and the options that don't apply are refused; ``-t 1`` finds identical rows on every
dtype and backend; ``--keep central`` breaks a pair's tie by the lowest id."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pairkit.core.store_writer import write_store
from pairkit.errors import UsageError
from pairkit.mine.dedup import DedupConfig, run_against
from pairkit.mine.dedup_command import dedup_to_files


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def store(path, rows: list[np.ndarray], name: str, hashes: list[str] | None = None):
    items = pd.DataFrame({"path": [f"{name}{i}.jpg" for i in range(len(rows))]})
    if hashes is not None:
        items["file_sha256"] = hashes
    return write_store(path, np.stack(rows).astype(np.float32), items, dtype="float32")


@pytest.fixture
def chained(tmp_path):
    """TEST: a0, a1 (a1 = the mean direction of a0 and b0), five random rows; TRAIN: b0
    and five random rows. a0.a1 = a1.b0 = 0.985, a0.b0 = 0.94: a1 leaks (0.985 >= 0.965),
    a0 does not; grouped in one graph, a0 leads and takes a1, and b0 is split off."""
    rng = np.random.default_rng(0)
    d = 16
    e = np.eye(d)
    th = np.arccos(0.94)
    a0, b0 = e[0], np.cos(th) * e[0] + np.sin(th) * e[1]
    a1 = unit(a0 + b0)
    a = store(tmp_path / "a", [a0, a1, *(unit(rng.normal(size=d)) for _ in range(5))], "a")
    b = store(tmp_path / "b", [b0, *(unit(rng.normal(size=d)) for _ in range(5))], "b")
    return a, b


def test_a_leak_is_a_pair_across_not_a_group(chained) -> None:
    a, b = chained
    for t in (0.965, 0.98):
        table, summary = run_against(a.root, DedupConfig(threshold=t), b.root)
        assert table[["id", "other_id"]].values.tolist() == [[1, 0]]
        assert table["similarity"].iloc[0] == pytest.approx(0.985, abs=1e-3)
        assert table["match"].tolist() == ["near"] and summary["leaks"] == 1
    # the other way round: b0 leaks to a1 (its best), the same pair
    table, _ = run_against(b.root, DedupConfig(threshold=0.965), a.root)
    assert table[["id", "other_id"]].values.tolist() == [[0, 1]]
    # at 0.93 both a0 (0.94) and a1 leak
    table, _ = run_against(a.root, DedupConfig(threshold=0.93), b.root)
    assert table["id"].tolist() == [0, 1] and table["other_id"].tolist() == [0, 0]


def test_an_exact_copy_is_named_before_a_closer_vector(tmp_path) -> None:
    rng = np.random.default_rng(1)
    a0 = unit(rng.normal(size=8))
    a = store(tmp_path / "a", [a0, unit(rng.normal(size=8))], "a", ["a" * 64, "1" * 64])
    # b0: the same file as a0 (its vector a little off, as another decode may give);
    # b1: a0's vector exactly, another file
    b0 = unit(a0 + 0.02 * rng.normal(size=8))
    b = store(tmp_path / "b", [b0, a0, unit(rng.normal(size=8))], "b",
              ["a" * 64, "2" * 64, "3" * 64])
    table, summary = run_against(a.root, DedupConfig(threshold=0.95), b.root)
    assert table[["id", "other_id", "match"]].values.tolist() == [[0, 0, "exact"]]
    assert table["similarity"].tolist() == [1.0] and summary["exact"] == 1
    exact, _ = run_against(a.root, DedupConfig(exact_only=True), b.root)
    assert exact[["id", "other_id", "match"]].values.tolist() == [[0, 0, "exact"]]


def test_refusals(chained, tmp_path) -> None:
    a, b = chained
    out = tmp_path / "out.csv"
    # -o inside the --against store: it is an input too
    with pytest.raises(UsageError, match="inside the input"):
        dedup_to_files(a.root, str(b.root / "manifest.json"), DedupConfig(), against=b.root,
                       force=True)
    assert b.root.joinpath("manifest.json").read_text().startswith("{")
    with pytest.raises(UsageError, match="--keep does not apply to --against"):
        dedup_to_files(a.root, str(out), DedupConfig(keep="central"), against=b.root)
    # --absolute without image roots (stores made by import), leak or not
    for t in (0.9, 0.965):
        with pytest.raises(UsageError, match="--absolute needs"):
            dedup_to_files(a.root, str(out), DedupConfig(threshold=t, absolute=True),
                           against=b.root)
    for cfg, name in ((DedupConfig(exact_only=True, threshold=0.5), "--threshold"),
                      (DedupConfig(exact_only=True, method="pixels"), "--method"),
                      (DedupConfig(exact_only=True, pixel_threshold=0.9),
                       "--pixel-threshold")):
        with pytest.raises(UsageError, match=f"{name} does not apply to --exact-only"):
            dedup_to_files(a.root, str(out), cfg)
    assert not out.exists()


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_threshold_one_groups_identical_rows(tmp_path, dtype, backend) -> None:
    """-t 1 (allowed: the threshold is in (0, 1]) means identical vectors: a stored row's
    inner product with itself falls short of 1 by float rounding (float16: ~1e-3), so
    they were not grouped (0 of 5 pairs on float16; 5 and 4 by backend on float32)."""
    from pairkit.mine.dedup import run_dedup

    v = np.random.default_rng(2).normal(size=(5, 12))
    items = pd.DataFrame({"path": [f"p{i}.jpg" for i in range(10)]})
    st = write_store(tmp_path / "s", np.repeat(v, 2, axis=0), items, dtype=dtype)
    table, summary = run_dedup(st.root, DedupConfig(threshold=1.0, keep="first",
                                                    backend=backend, device="cpu"))
    assert summary["groups"] == 5 and summary["threshold"] == 1.0
    assert table.groupby("group")["id"].apply(list).tolist() == [[0, 1], [2, 3], [4, 5],
                                                                 [6, 7], [8, 9]]


def test_central_keeps_the_lowest_id_of_a_pair() -> None:
    """Both members of a two-member group have the same centrality (a . b); computed as
    sums, they differed in the last bit and the higher id was kept in 81 of 300 pairs."""
    from pairkit.mine.near_duplicates import find_near_duplicates

    rng = np.random.default_rng(0)
    kept = []
    for _ in range(300):
        a = rng.normal(size=16)
        x = np.stack([a, a + 0.05 * rng.normal(size=16)])
        x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
        r = find_near_duplicates(x, 0.9, keep="central")
        kept.append(int(r.table[r.table["keep"]]["id"].iloc[0]))
    assert kept == [0] * 300
