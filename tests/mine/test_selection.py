"""The vectorised selection pieces against the straightforward forms they replaced."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core.relations import Relation
from pairkit.mine.selection import choose_positives, first_in_window, padded_rows


def argsort_window(in_win: np.ndarray, vrank: np.ndarray, K: int) -> np.ndarray:
    """The sort-based form: key = valid rank inside the window, inf outside; the K
    smallest by a stable argsort, then in rank order, -1 where the window ran out."""
    key = np.where(in_win, vrank.astype(np.float64), np.inf)
    kk = min(K, key.shape[1])
    pick = np.argsort(key, axis=1, kind="stable")[:, :kk]
    ok = np.isfinite(np.take_along_axis(key, pick, 1))
    pick_rank = np.where(ok, np.take_along_axis(vrank, pick, 1), np.iinfo(np.int64).max)
    order = np.argsort(pick_rank, axis=1, kind="stable")
    pick = np.take_along_axis(pick, order, 1)
    ok = np.take_along_axis(ok, order, 1)
    out = np.full((len(key), K), -1, dtype=np.int64)
    out[:, :kk] = np.where(ok, pick, -1)
    return out


@pytest.mark.parametrize("k", [1, 3, 12])
@pytest.mark.parametrize("lo,width", [(0, 5), (2, 5), (0, 40), (7, 3)])
def test_first_in_window_equals_the_sorted_selection(k: int, lo: int, width: int) -> None:
    rng = np.random.default_rng(k * 100 + lo)
    for density in (0.1, 0.5, 0.95):
        valid = rng.random((300, k)) < density
        vrank = np.cumsum(valid, axis=1) - 1
        hi = lo + width
        in_win = valid & (vrank >= lo) & (vrank < hi)
        for K in (1, min(5, width), width):
            np.testing.assert_array_equal(first_in_window(in_win, vrank - lo, K),
                                          argsort_window(in_win, vrank, K))


def test_padded_rows_equals_a_list_per_row() -> None:
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 6, 50)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    ids = rng.integers(0, 1000, offsets[-1])
    rows = rng.permutation(50)[:30]
    got = padded_rows(offsets, ids, rows)
    width = max(1, int(counts[rows].max()))
    want = np.full((len(rows), width), -1)
    for i, r in enumerate(rows):
        part = ids[offsets[r]:offsets[r + 1]]
        want[i, : len(part)] = part
    np.testing.assert_array_equal(got, want)
    empty = padded_rows(np.zeros(4, np.int64), np.zeros(0, np.int64), np.arange(3))
    np.testing.assert_array_equal(empty, np.full((3, 1), -1))


@pytest.mark.parametrize("how", ["weakest", "random"])
def test_one_positive_each_is_what_the_sort_would_choose(how: str) -> None:
    """Two views per source: the single positive is the weakest, the random draw and the
    margin reference, as the lexsort over the positive sets gives."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(40, 6)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    anchors = np.arange(40)
    pos_ids = anchors ^ 1
    offsets = np.arange(41)
    chosen, score, ref = choose_positives(x, anchors, offsets, pos_ids, how, seed=2)
    np.testing.assert_array_equal(chosen, pos_ids)
    np.testing.assert_array_equal(score, np.einsum("nd,nd->n", x, x[pos_ids]))
    np.testing.assert_array_equal(ref, score)
    # with a second positive for one anchor the general path runs; the others agree
    offsets2 = np.concatenate([[0], np.arange(2, 42)])
    pos2 = np.concatenate([[1, 2], pos_ids[1:]])
    chosen2, _, ref2 = choose_positives(x, anchors, offsets2, pos2, how, seed=2)
    np.testing.assert_array_equal(chosen2[1:], chosen[1:])
    np.testing.assert_array_equal(ref2[1:], ref[1:])
    assert ref2[0] == min(float(x[0] @ x[1]), float(x[0] @ x[2]))


def test_pair_dots_computes_each_pair_once_with_the_same_bits() -> None:
    from pairkit.index.search import row_dots
    from pairkit.mine.selection import pair_dots

    rng = np.random.default_rng(9)
    x = rng.normal(size=(600, 33)).astype(np.float32)
    a = np.arange(600)
    partner = rng.permutation(600).reshape(300, 2)
    b = np.empty(600, np.int64)
    b[partner[:, 0]], b[partner[:, 1]] = partner[:, 1], partner[:, 0]
    np.testing.assert_array_equal(pair_dots(x, a, b), row_dots(x, a, b))
    c = (b + 1) % 600  # not an involution: the plain products
    np.testing.assert_array_equal(pair_dots(x, a, c), row_dots(x, a, c))


def test_positives_of_the_source_give_the_codes_of_the_relation() -> None:
    """The instance relation's positives are the other rows of the source: classifying
    with that shortcut gives the codes of the relation's own test."""
    import pandas as pd

    from pairkit.core.relations import build_relation
    from pairkit.mine.config import MineConfig
    from pairkit.mine.selection import SelectionContext, classify_candidates

    rng = np.random.default_rng(10)
    src = rng.integers(0, 40, 200)
    items = pd.DataFrame({"source": [f"s{s}" for s in src], "path": [f"{i}" for i in
                                                                       range(200)]})
    rel = build_relation("instance", items)
    sources = rel.group
    anchors = rel.anchors()
    offsets, pos_ids = rel.positive_sets(anchors)
    ids = rng.integers(-1, 200, (len(anchors), 30))
    ids[:, 0] = anchors
    scores = rng.random(ids.shape).astype(np.float32)
    ref = rng.random(len(anchors)).astype(np.float32)
    x = np.zeros((200, 2), np.float32)
    rows = np.arange(len(anchors))
    codes = [classify_candidates(SelectionContext(x, sources, rel, MineConfig(), None, offsets,
                                                  pos_ids, positives_share_source=share),
                                 rows, anchors, ids, scores, ref)[0]
             for share in (False, True)]
    np.testing.assert_array_equal(codes[0], codes[1])
    assert set(np.unique(codes[0])) >= {0, 1, 2, 3}


def pairs_store() -> tuple[np.ndarray, Relation, np.ndarray]:
    """4 sources x 2 views (the two views of a source share a path); the pairs relation
    lists only a.jpg -> b.jpg, so a source's other view is no positive under it."""
    import pandas as pd

    from pairkit.core.relations import build_relation

    rng = np.random.default_rng(11)
    base = rng.normal(size=(4, 8))
    base[1] = base[0] + 0.8 * rng.normal(size=8)  # b: near a
    x = np.repeat(base, 2, axis=0) + 0.05 * rng.normal(size=(8, 8))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    src = np.repeat(["a", "b", "c", "d"], 2)
    items = pd.DataFrame({"path": [f"{s}.jpg" for s in src], "source": src})
    rel = build_relation("pairs", items, pd.DataFrame({"anchor": ["a.jpg"],
                                                       "positive": ["b.jpg"]}))
    return x, rel, pd.factorize(items["source"])[0].astype(np.int64)


def test_pairs_relation_never_hands_out_the_anchors_own_views() -> None:
    """Under pairs:FILE the relation's positives do not cover the anchor's other views:
    they are coded same_source, never negatives (they are the most similar rows). Checked
    on the classification by hand and on a whole hard mining run against brute force."""
    from pairkit.index.search import knn_search
    from pairkit.mine.config import MineConfig
    from pairkit.mine.hard_negatives import mine_negatives
    from pairkit.mine.selection import CODE, SelectionContext, classify_candidates

    x, rel, sources = pairs_store()
    anchors = rel.anchors()
    assert anchors.tolist() == [0, 1]
    offsets, pos_ids = rel.positive_sets(anchors)
    # candidates of anchor 0 / 1: every row, best first
    ids = np.argsort(-(x[anchors] @ x.T), axis=1, kind="stable")
    scores = np.take_along_axis(x[anchors] @ x.T, ids, 1)
    ctx = SelectionContext(x, sources, rel, MineConfig(), None, offsets, pos_ids)
    code = classify_candidates(ctx, np.arange(2), anchors, ids, scores,
                               np.zeros(2, np.float32))[0]
    want = np.select([ids == anchors[:, None], sources[ids] == 1,
                      sources[ids] == 0], [CODE["self"], CODE["positive"],
                                           CODE["same_source"]], 0)
    np.testing.assert_array_equal(code, want)
    assert (code == CODE["same_source"]).sum() == 2
    # the whole run: the other view is each anchor's nearest non-positive
    for a in (0, 1):
        s = x @ x[a]
        s[[a, 2, 3]] = -np.inf
        assert int(np.argmax(s)) == a ^ 1
    res = mine_negatives(x, sources, rel, MineConfig(num_negatives=2),
                         lambda q, k: knn_search(q, x, k))
    assert res.pairs.anchors.tolist() == [0, 1]
    for i, a in enumerate(res.pairs.anchors):
        negs = res.pairs.neg_ids[i]
        assert (negs >= 0).all() and (sources[negs] != sources[a]).all()
        # brute force: the best two rows of other sources that are no positives
        s = (x @ x[a]).astype(np.float64)
        s[sources <= 1] = -np.inf
        assert negs.tolist() == np.argsort(-s, kind="stable")[:2].tolist()
    # each anchor's search fetched its one other view
    assert res.removed["same_source"] == 2


def test_margin_and_score_bounds_keep_a_candidate_exactly_at_the_bound() -> None:
    """docs/mine.md: keep a negative only if ``score <= pos - m``; drop candidates scoring
    *below* --min-score / *above* --max-score. ref 0.75, margin 0.25: a candidate at
    exactly 0.5 is valid and the next float32 above it is not; min-score 0.25 (max-score
    0.875): exactly 0.25 (0.875) is valid, the next float32 below (above) is not. Every
    value is exact in float32."""
    import pandas as pd

    from pairkit.core.relations import build_relation
    from pairkit.mine.config import MineConfig
    from pairkit.mine.selection import CODE, SelectionContext, classify_candidates

    items = pd.DataFrame({"path": [f"{i}.jpg" for i in range(7)],
                          "source": [f"s{i}" for i in range(7)]})
    rel = build_relation("instance", items)
    up, down = np.float32(np.inf), np.float32(-np.inf)
    scores = np.array([[0.5, np.nextafter(np.float32(0.5), up), 0.25,
                        np.nextafter(np.float32(0.25), down)]], np.float32)
    ids = np.array([[1, 2, 3, 4]])
    ref = np.array([0.75], np.float32)

    def codes(cfg: MineConfig, s: np.ndarray = scores) -> list[int]:
        ctx = SelectionContext(np.zeros((7, 2), np.float32), np.arange(7), rel, cfg, None,
                               np.array([0, 0]), np.zeros(0, np.int64))
        return classify_candidates(ctx, np.arange(1), np.array([0]), ids, s, ref)[0][0].tolist()

    assert codes(MineConfig(absolute_margin=0.25)) == [0, CODE["absolute_margin"], 0, 0]
    assert codes(MineConfig(min_score=0.25)) == [0, 0, 0, CODE["min_score"]]
    # relative: 0.75 - 0.5 * 0.75 = 0.375
    rel_scores = np.array([[0.375, np.nextafter(np.float32(0.375), up), 0.25, 0.0]],
                          np.float32)
    assert codes(MineConfig(relative_margin=0.5), rel_scores) == [
        0, CODE["relative_margin"], 0, 0]
    top = np.array([[0.875, np.nextafter(np.float32(0.875), up), 0.5, 0.0]], np.float32)
    assert codes(MineConfig(max_score=0.875), top) == [0, CODE["max_score"], 0, 0]


@pytest.mark.parametrize("sampling", ["random", "softmax"])
def test_sampled_negatives_follow_the_anchor_not_its_place_in_the_list(sampling: str) -> None:
    """The draw is keyed by (seed, anchor id, candidate id): an anchor gets the same sampled
    negatives whatever other anchors the run has (a subset or resumed run). Pairs
    i -> 20 + i for anchors 0..19, then the same without anchor 0 (every other anchor
    moves up one place in the list)."""
    import pandas as pd

    from pairkit.core.relations import build_relation
    from pairkit.index.search import knn_search
    from pairkit.mine.config import MineConfig
    from pairkit.mine.hard_negatives import mine_negatives

    rng = np.random.default_rng(12)
    x = rng.normal(size=(60, 8))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    items = pd.DataFrame({"path": [f"{i}.jpg" for i in range(60)],
                          "source": [f"{i}" for i in range(60)]})
    cfg = MineConfig(num_negatives=3, sampling=sampling, seed=5, sampling_temperature=1.0)

    def mine(first: int) -> dict[int, list[int]]:
        pairs = pd.DataFrame({"anchor": [f"{i}.jpg" for i in range(first, 20)],
                              "positive": [f"{20 + i}.jpg" for i in range(first, 20)]})
        res = mine_negatives(x, np.arange(60), build_relation("pairs", items, pairs), cfg,
                             lambda q, k: knn_search(q, x, k))
        return {int(a): res.pairs.neg_ids[i].tolist() for i, a in enumerate(res.pairs.anchors)}

    every, later = mine(0), mine(1)
    assert sorted(later) == list(range(1, 20))
    assert {a: every[a] for a in later} == later
    # the draw is not simply the top 3 (so the check above compares random draws)
    top = {a: np.argsort(-(x @ x[a]), kind="stable")[:5].tolist() for a in later}
    assert any(later[a] != [j for j in top[a] if j not in (a, 20 + a)][:3] for a in later)
