"""Weighted kNN against a direct numpy computation and scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.eval.knn import knn_hits, knn_rank_classes
from pairkit.eval.neighbours import Exclusion, search_excluding
from pairkit.index.search import flat_index


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _neighbours(q: np.ndarray, r: np.ndarray, k: int, excl: Exclusion | None = None):
    blocks = list(search_excluding(q, flat_index(r), len(r), k, excl, block_rows=7))
    return (np.concatenate([b[1] for b in blocks]), np.concatenate([b[2] for b in blocks]))


@pytest.mark.parametrize("k,temperature", [(1, 0.07), (10, 0.07), (25, 0.5)])
def test_weighted_knn_matches_the_formula(k: int, temperature: float) -> None:
    rng = np.random.default_rng(0)
    refs, queries = _unit(rng, 300, 8), _unit(rng, 40, 8)
    ref_labels = rng.integers(0, 6, size=300)
    scores, ids = _neighbours(queries, refs, k)
    classes, class_scores = knn_rank_classes(ref_labels[ids], scores, k, temperature)
    sims = queries.astype(np.float64) @ refs.T.astype(np.float64)
    for qi in range(len(queries)):
        nn = np.argsort(-sims[qi])[:k]
        direct = np.zeros(6)
        for j in nn:
            direct[ref_labels[j]] += np.exp(sims[qi, j] / temperature)
        order = sorted(np.flatnonzero(direct), key=lambda c: (-direct[c], c))[:5]
        got = [c for c in classes[qi] if c >= 0]
        assert got == order
        # scores are the formula's up to the per-row factor exp(-max_sim/T)
        scale = np.exp(sims[qi, nn].max() / temperature)
        np.testing.assert_allclose(class_scores[qi, : len(order)] * scale, direct[order],
                                   rtol=1e-4)


def test_uniform_knn_matches_sklearn() -> None:
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(1)
    refs, queries = _unit(rng, 400, 6), _unit(rng, 100, 6)
    ref_labels = rng.integers(0, 5, size=400)
    for k in (1, 4, 15):
        scores, ids = _neighbours(queries, refs, k)
        classes, _ = knn_rank_classes(ref_labels[ids], scores, k, weighting="uniform")
        clf = KNeighborsClassifier(n_neighbors=k, algorithm="brute").fit(refs, ref_labels)
        # even k gives count ties: both break them towards the smaller class
        np.testing.assert_array_equal(classes[:, 0], clf.predict(queries))


def test_ties_and_absent_classes() -> None:
    labels = np.array([[3, 1, 1, 3], [2, 2, -1, -1]])
    sims = np.array([[0.5, 0.5, 0.5, 0.5], [0.9, 0.1, -np.inf, -np.inf]])
    classes, scores = knn_rank_classes(labels, sims, 4, 0.1)
    assert classes[0].tolist() == [1, 3, -1, -1, -1]  # tie -> smaller class code first
    np.testing.assert_allclose(scores[0, :2], [2.0, 2.0])
    assert classes[1].tolist() == [2, -1, -1, -1, -1]  # missing neighbours ignored
    top1, top5 = knn_hits(classes, np.array([3, 7]))  # class 7 has no reference
    assert top1.tolist() == [False, False]
    assert top5.tolist() == [True, False]


def test_exclusion_matches_brute_force() -> None:
    rng = np.random.default_rng(2)
    x = _unit(rng, 120, 5)
    groups = rng.integers(0, 30, size=120)  # sources with up to ~9 views
    excl = Exclusion(np.arange(120), groups, groups)
    scores, ids = _neighbours(x, x, 10, excl)
    sims = x @ x.T
    for i in range(120):
        allowed = np.flatnonzero(groups != groups[i])
        expect = allowed[np.argsort(-sims[i, allowed], kind="stable")][:10]
        np.testing.assert_allclose(scores[i], sims[i, expect], rtol=1e-5)
        assert set(ids[i]) == set(expect)


def test_exclusion_pads_when_too_few_remain() -> None:
    x = _unit(np.random.default_rng(3), 4, 3)
    groups = np.array([0, 0, 0, 1])
    scores, ids = _neighbours(x, x, 3, Exclusion(np.arange(4), groups, groups))
    assert ids[0].tolist() == [3, -1, -1]
    assert np.isneginf(scores[0, 1:]).all()


def test_equal_neighbour_similarities_tie_exactly_smaller_code_wins() -> None:
    """Two classes with the same neighbour similarities have the same score to the bit,
    so the smaller class code wins (the cumulative-sum difference gave the later class a
    one-ULP lead)."""
    classes, scores = knn_rank_classes(np.array([[0, 1, 0, 1]]),
                                       np.array([[0.73, 0.73, 0.54, 0.54]], np.float32), 4)
    assert classes[0, :2].tolist() == [0, 1]
    assert scores[0, 0] == scores[0, 1]
    # the same multiset of similarities in another order within the list
    classes, scores = knn_rank_classes(np.array([[2, 0, 0, 2, 1]]),
                                       np.array([[0.9, 0.9, 0.5, 0.5, 0.1]]), 5, 0.1)
    assert classes[0, :3].tolist() == [0, 2, 1]
    assert scores[0, 0] == scores[0, 1]


@pytest.mark.parametrize("weighting", ["exp", "uniform"])
def test_ranking_with_many_ties_matches_brute_force(weighting: str) -> None:
    """Similarities of 4 levels only (duplicates, float16 stores): many exact ties.
    Brute force: each class's weights summed with math.fsum (correctly rounded, so equal
    multisets give equal sums whatever their order), best score first, equal scores by
    the smaller class code."""
    import math

    rng = np.random.default_rng(11)
    nq, k, t = 400, 6, 0.07
    sims = -np.sort(-rng.choice([0.31, 0.54, 0.73, 0.8], size=(nq, k)), axis=1)
    labels = rng.integers(0, 3, size=(nq, k))
    labels[rng.random((nq, k)) < 0.05] = -1
    classes, _ = knn_rank_classes(labels, sims, k, t, weighting=weighting)
    n_ties = 0
    for qi in range(nq):
        valid = labels[qi] >= 0
        top = sims[qi][valid].max(initial=-np.inf)
        score: dict[int, float] = {}
        for c in sorted(set(labels[qi][valid].tolist())):
            w = [math.exp((s - top) / t) if weighting == "exp" else 1.0
                 for s, lab in zip(sims[qi], labels[qi], strict=True) if lab == c]
            score[c] = math.fsum(w)
        want = sorted(score, key=lambda c: (-score[c], c))
        n_ties += len(set(score.values())) < len(score)
        assert [c for c in classes[qi] if c >= 0] == want, qi
    assert n_ties > 20  # the case exercises ties


@pytest.mark.parametrize("weighting", ["exp", "uniform"])
def test_only_the_first_k_of_wider_neighbour_lists_count(weighting: str) -> None:
    """Eval passes as many neighbour columns as its widest list needs (K > k): the
    ranking uses the first k only. By hand (uniform counts), then against the slice."""
    labels = np.array([[1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                       [1, 2, 2, 5, 5, 5, 5, 5, 5, 5]])
    sims = np.tile(np.linspace(0.9, 0.0, 10), (2, 1))
    classes, _ = knn_rank_classes(labels, sims, 3, weighting="uniform")
    # first 3: row 0 two 1s and a 0 -> [1, 0] (with 4 it would tie and 0 would win);
    # row 1: 2 twice, 1 once; class 5 is not among them
    assert classes.tolist() == [[1, 0, -1, -1, -1], [2, 1, -1, -1, -1]]
    rng = np.random.default_rng(5)
    labels = rng.integers(-1, 8, size=(50, 10))
    sims = -np.sort(-rng.random((50, 10)), axis=1)
    for k in (1, 3, 7):
        wide = knn_rank_classes(labels, sims, k, 0.1, weighting=weighting)
        narrow = knn_rank_classes(labels[:, :k].copy(), sims[:, :k].copy(), k, 0.1,
                                  weighting=weighting)
        np.testing.assert_array_equal(wide[0], narrow[0])
        np.testing.assert_array_equal(wide[1], narrow[1])


def test_top5_hit_is_a_true_class_ranked_fifth_not_sixth() -> None:
    """Six classes with 6, 5, 4, 3, 2, 1 neighbours: ranked 0..5. The true class at rank
    1 is a top-1 hit; at rank 5 (the 5th) a top-5 hit only; at rank 6 neither."""
    row = np.repeat([0, 1, 2, 3, 4, 5], [6, 5, 4, 3, 2, 1])
    labels = np.tile(row, (3, 1))
    sims = np.full(labels.shape, 0.5)
    classes, _ = knn_rank_classes(labels, sims, labels.shape[1], weighting="uniform")
    assert classes.tolist() == [[0, 1, 2, 3, 4]] * 3
    top1, top5 = knn_hits(classes, np.array([0, 4, 5]))
    assert top1.tolist() == [True, False, False]
    assert top5.tolist() == [True, True, False]
