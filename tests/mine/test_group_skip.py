"""The near-duplicate rule's big groups are skipped by an exact search, not fetched and
flagged (hunt-r 1: a store of 50,000 rows with one group of 10,000 identical rows of mixed
labels ran past 900 s under ``--relation label --fn-rules near-duplicate``: every anchor
near the group searched ever deeper, 4x the k per retry, past the group's flagged rows).
The table is the one of the search that fetches the group and drops it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pairkit.index.options import IndexOptions
from pairkit.mine import group_skip, hard_negatives
from pairkit.mine.config import MineConfig
from pairkit.mine.false_negatives import FalseNegativeConfig

SOURCES = 1300  # two views each
BIG = 560  # sources whose views are all one identical vector: 1,120 rows (>= 1,024)
# the small store of the comparisons with the fetching search (fast), its group skipped
# from SMALL_GROUP rows on
SMALL_SOURCES, SMALL_BIG, SMALL_GROUP = 300, 60, 100
NEAR_DUP = FalseNegativeConfig(rules=("near-duplicate",))


def big_group_store(path: Path, sources: int = SOURCES, big: int = BIG,
                    seed: int = 0):  # noqa: ANN201
    """Two views of each of ``sources`` sources in 4 classes (labels at random, so the
    big group holds every class), the first ``big`` sources' views one identical
    vector, and a few groups of three near copies."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(seed)
    lab = rng.integers(0, 4, sources)
    centers = rng.normal(size=(4, 16))
    base = centers[lab] + 1.5 * rng.normal(size=(sources, 16))
    for j in range(big, big + 60, 3):  # near copies of three sources
        base[j + 1] = base[j] + 1e-3 * rng.normal(size=16)
        base[j + 2] = base[j] + 1e-3 * rng.normal(size=16)
    x = np.repeat(base, 2, axis=0) + 0.3 * rng.normal(size=(2 * sources, 16))
    x[: 2 * big] = base[0]
    src = [f"c{c}/img{i:05d}.jpg" for i, c in enumerate(lab)]
    items = pd.DataFrame({"path": [f"{s}#{v}" for s in src for v in range(2)],
                          "source": [s for s in src for _ in range(2)],
                          "view": [v for _ in src for v in range(2)],
                          "label": [f"class{c}" for c in lab for _ in range(2)]})
    return write_store(path, x.astype(np.float32), items, encoder={"name": "random"},
                       dtype="float32")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return big_group_store(tmp_path_factory.mktemp("groups") / "s")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return big_group_store(tmp_path_factory.mktemp("small") / "s", SMALL_SOURCES, SMALL_BIG)


@pytest.fixture
def skips_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """The small store's group (120 rows) skipped."""
    monkeypatch.setattr(group_skip, "MIN_SKIPPED_GROUP", SMALL_GROUP)


def mine(store, relation: str, cfg: MineConfig,  # noqa: ANN001
         fn_config: FalseNegativeConfig = NEAR_DUP,
         index: IndexOptions | None = None):  # noqa: ANN201
    from pairkit.mine.command import mine_store

    return mine_store(store, relation, cfg, index or IndexOptions(kind="flat"), fn_config)


def fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search before: the groups fetched and flagged."""
    monkeypatch.setattr(hard_negatives, "skips_groups", lambda *a: None)


def assert_same_table(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Same rows, columns, ids, ranks and flags; scores to float rounding."""
    assert list(got.columns) == list(want.columns)
    scores = [c for c in got.columns if c.endswith("score")]
    pd.testing.assert_frame_equal(got.drop(columns=scores), want.drop(columns=scores))
    np.testing.assert_allclose(got[scores].to_numpy(float), want[scores].to_numpy(float),
                               atol=1e-6)


@pytest.mark.parametrize("relation", ["instance", "label"])
def test_the_big_group_is_not_searched_through(store, relation: str) -> None:  # noqa: ANN001
    """No anchor searches past the big group: the first k holds every anchor's window
    (failed before: the anchors of the group, and under the label relation those with a
    positive in it, were searched again with 4x the k until it passed the group's 1,120
    rows: 3 retries, k_max 1,216 (instance) / 1,024 (label), 1.25M / 0.97M candidates
    flagged; now 368 / 886)."""
    table, stats = mine(store, relation, MineConfig(num_negatives=5))
    assert stats["retries"] == 0 and stats["k_max"] == stats["k_initial"], stats
    assert stats["fn_flagged"].get("near_duplicate", 0) < 2 * BIG, stats
    in_group = table["anchor_id"] < 2 * BIG
    assert (table.loc[in_group, "negative_id"] >= 2 * BIG).all()


def brute_force(x: np.ndarray, sources: np.ndarray, groups: np.ndarray, anchor: int,
                k: int) -> np.ndarray:
    """The instance relation's top ``k`` negatives of ``anchor`` under the near-duplicate
    rule, by numpy: rows of other sources outside the near-duplicate group of the anchor
    and of its other view, score descending (float64), ties by ascending id."""
    mine_ = np.flatnonzero(sources == sources[anchor])
    skipped = {int(g) for g in groups[mine_] if g >= 0}
    other = np.flatnonzero((sources != sources[anchor])
                           & ~np.isin(groups, sorted(skipped)))
    s = x[other].astype(np.float64) @ x[anchor].astype(np.float64)
    return other[np.lexsort((other, -s))][:k]


def test_negatives_are_those_of_a_brute_force_search(store) -> None:  # noqa: ANN001
    """Each anchor's negatives (instance relation) are its nearest rows of other sources
    outside its and its positive's near-duplicate groups, by numpy (the groups are
    ``pairkit dedup``'s, found independently here)."""
    from pairkit.mine.fn_context import near_duplicate_threshold
    from pairkit.mine.near_duplicates import near_duplicate_groups

    x = store.vectors(np.float32)
    sources = store.source_codes()
    groups = np.asarray(near_duplicate_groups(x, near_duplicate_threshold(NEAR_DUP, "float32"),
                                              sources=sources))
    assert (groups[: 2 * BIG] == groups[0]).all() and groups[0] >= 0
    table, _ = mine(store, "instance", MineConfig(num_negatives=5))
    got = table.sort_values(["anchor_id", "neg_rank"])
    anchors = got["anchor_id"].unique()
    for anchor in np.r_[anchors[:40], anchors[2 * BIG - 20: 2 * BIG + 80], anchors[-20:]]:
        rows = got[got["anchor_id"] == anchor]
        want = brute_force(x, sources, groups, int(anchor), 5)
        assert rows["negative_id"].tolist() == want.tolist(), anchor


def part_paths(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Each way :func:`pairkit.index.outside.search_outside_parts` searches a part: in a
    copy of the other rows, or in every row with k + the part's size."""
    from pairkit.index import outside

    big = how == "copy"
    monkeypatch.setattr(outside, "SMALL_PART_QUERIES", 0 if big else 10**9)
    monkeypatch.setattr(outside, "OVER_FETCH_ROWS", 0 if big else 10**9)


CONFIGS = [
    ("instance", MineConfig(num_negatives=5), NEAR_DUP),
    ("label", MineConfig(num_negatives=5), NEAR_DUP),
    ("instance", MineConfig(num_negatives=20, sampling="softmax", sampling_temperature=0.1),
     NEAR_DUP),
    ("label", MineConfig(num_negatives=5, sampling="random", range_min=3, range_max=30),
     FalseNegativeConfig(rules=("near-duplicate", "margin"))),
    ("label", MineConfig(num_negatives=5, batch_size=64),
     FalseNegativeConfig(rules=("near-duplicate", "mutual-neighbour"))),
    ("instance", MineConfig(num_negatives=5, relative_margin=0.05), NEAR_DUP),
]


@pytest.mark.parametrize("how", ["as-is", "copy", "over-fetch"])
@pytest.mark.parametrize(("relation", "cfg", "fn_config"), CONFIGS)
def test_the_table_is_the_one_of_fetching_the_group(small, skips_small, relation, cfg,  # noqa: ANN001
                                                    fn_config, how,  # noqa: ANN001
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The table equals the one of the search that fetches the big group and flags it,
    for both relations, samplings, windows, margins, small blocks and rule sets, with the
    skipped rows searched around in a copy or over-fetched."""
    if how != "as-is":
        part_paths(monkeypatch, how)
    got, stats = mine(small, relation, cfg, fn_config)
    fetched(monkeypatch)
    want, before = mine(small, relation, cfg, fn_config)
    assert stats["k_max"] <= before["k_max"]
    assert stats["removed"]["false_negative"] < before["removed"]["false_negative"]
    assert_same_table(got, want)


@pytest.mark.parametrize("relation", ["instance", "label"])
def test_every_group_skipped_gives_the_same_table(small, relation: str,  # noqa: ANN001
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With every group skipped (the groups of three too: many distinct sets of skipped
    rows in a block, anchors whose positives are in other groups than theirs), the same
    table."""
    monkeypatch.setattr(group_skip, "MIN_SKIPPED_GROUP", 2)
    cfg = MineConfig(num_negatives=5)
    got, _ = mine(small, relation, cfg)
    fetched(monkeypatch)
    want, _ = mine(small, relation, cfg)
    assert_same_table(got, want)


@pytest.mark.parametrize("relation", ["instance", "label"])
def test_torch_engine_skips_the_group_too(small, skips_small, relation: str,  # noqa: ANN001
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact torch search masks the group's rows: the same table as FAISS's fetch."""
    pytest.importorskip("torch")
    cfg = MineConfig(num_negatives=5)
    got, stats = mine(small, relation, cfg,
                      index=IndexOptions(kind="flat", backend="torch", device="cpu"))
    assert stats["retries"] == 0
    fetched(monkeypatch)
    want, _ = mine(small, relation, cfg)
    assert_same_table(got, want)


def test_approximate_indexes_and_kept_flags_fetch_as_before(small, skips_small) -> None:  # noqa: ANN001
    """IVF can't skip rows exactly, and flags kept (``--fn-mode keep``) must be seen:
    there the group is fetched and flagged as before."""
    _, stats = mine(small, "instance", MineConfig(num_negatives=5),
                    index=IndexOptions(kind="ivf", nlist=4, nprobe=4))
    assert stats["k_max"] > 2 * SMALL_BIG
    _, stats = mine(small, "instance", MineConfig(num_negatives=5, fn_mode="keep"))
    assert stats["fn_flagged"]["near_duplicate"] > 2 * SMALL_BIG


def test_big_groups_and_the_groups_each_anchor_skips() -> None:
    """Codes of the groups of at least ``min_rows`` rows; each anchor's (and its
    positives') codes once, ascending, -1 first."""
    groups = np.array([5, 5, 5, -1, 7, 7, 9, 9, 9, 9, 2])
    codes = group_skip.big_groups(groups, min_rows=3)
    assert codes.tolist() == [0, 0, 0, -1, -1, -1, 1, 1, 1, 1, -1]
    assert group_skip.big_groups(groups, min_rows=5) is None
    assert group_skip.big_groups(np.full(4, -1)) is None
    positives = np.array([[1, 6, -1], [7, 8, 9], [4, -1, -1], [6, 2, 10]])
    got = group_skip.skipped_groups(codes, np.array([0, 6, 3, 0]), positives)
    assert got.tolist() == [[0, 1], [-1, 1], [-1, -1], [0, 1]]


def test_blocks_run_elsewhere_skip_the_group_too(small, skips_small) -> None:  # noqa: ANN001
    """Blocks shipped (pickled, as to a cluster's workers) carry the groups they skip:
    the same table as a run here."""
    import pickle

    from pairkit.core.blocks_here import map_here
    from pairkit.mine.command import mine_store

    def elsewhere(fn, shared, spans):  # noqa: ANN001, ANN202
        assert shared.skip_groups is not None
        return map_here(fn, pickle.loads(pickle.dumps(shared)), spans)

    cfg = MineConfig(num_negatives=5, batch_size=64)
    want, _ = mine(small, "label", cfg)
    got, stats = mine_store(small, "label", cfg, IndexOptions(kind="flat"), NEAR_DUP,
                            map_blocks=elsewhere)
    assert stats["retries"] == 0
    pd.testing.assert_frame_equal(got, want)
