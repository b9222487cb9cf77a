"""Hard/easy negative selection against a brute-force reference."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from pairkit.core.relations import build_relation
from pairkit.errors import PairkitError, UsageError
from pairkit.index.search import knn_search
from pairkit.mine import selection
from pairkit.mine.config import MineConfig, validate_config
from pairkit.mine.hard_negatives import mine_negatives
from pairkit.mine.randomness import hash_uniform
from pairkit.mine.stats import summary_stats
from tests.conftest import random_store


def searcher_for(x: np.ndarray):
    return lambda q, k: knn_search(q, x, k)


def reference(x: np.ndarray, items: pd.DataFrame, kind: str, cfg: MineConfig
              ) -> dict[int, list[int]]:
    """Brute force: every score, exclusions and filters applied, window, top-K."""
    sources = pd.factorize(items["source"])[0]
    groups = pd.factorize(items[kind if kind == "label" else "source"])[0]
    lo, hi = cfg.window()
    out = {}
    for a in range(len(x)):
        pos = [p for p in range(len(x)) if p != a and groups[p] == groups[a]]
        if not pos:
            continue
        s = (x @ x[a]).astype(np.float32)
        ref = min(float(s[p]) for p in pos)
        valid = []
        for j in np.argsort(-s.astype(np.float64), kind="stable"):
            v = float(s[j])
            if j == a or groups[j] == groups[a] or sources[j] == sources[a]:
                continue
            if cfg.max_score is not None and v > cfg.max_score:
                continue
            if cfg.min_score is not None and v < cfg.min_score:
                continue
            if cfg.absolute_margin is not None and v > ref - cfg.absolute_margin:
                continue
            if cfg.relative_margin is not None and v > ref - cfg.relative_margin * abs(ref):
                continue
            valid.append(int(j))
        out[a] = valid[lo:hi][: cfg.num_negatives]
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return random_store(tmp_path_factory.mktemp("m") / "s", n_sources=60, views=3, dim=16,
                        classes=5)


CONFIGS = [
    MineConfig(),
    MineConfig(num_negatives=3, range_min=2, range_max=8),
    MineConfig(max_score=0.8, min_score=0.2),
    MineConfig(absolute_margin=0.1),
    MineConfig(relative_margin=0.2, num_negatives=4),
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("kind", ["instance", "label"])
def test_top_matches_brute_force(store, cfg: MineConfig, kind: str) -> None:
    x = store.vectors(np.float32)
    rel = build_relation(kind, store.items)
    res = mine_negatives(x, store.source_codes(), rel, cfg, searcher_for(x))
    ref = reference(x, store.items, kind, cfg)
    p = res.pairs
    assert sorted(ref) == p.anchors.tolist()
    for i, a in enumerate(p.anchors):
        got = [int(v) for v in p.neg_ids[i] if v >= 0]
        assert got == ref[int(a)], (kind, cfg, a)
    # scores are the true cosine, ranks start at range_min
    ok = p.neg_ids >= 0
    true = np.einsum("nd,nkd->nk", x[p.anchors], x[np.maximum(p.neg_ids, 0)])
    np.testing.assert_allclose(p.neg_scores[ok], true[ok], atol=1e-5)
    assert (p.neg_ranks[ok] >= cfg.range_min).all()


def test_label_relation_needs_retries_and_gets_no_silent_shortfall() -> None:
    # one big class of 240 and four of 15: the big class's first ~240 neighbours are
    # positives, far more than the initial k (sized by the median class)
    rng = np.random.default_rng(0)
    sizes = [240, 15, 15, 15, 15]
    centers = rng.normal(size=(5, 8)) * 3
    x = np.concatenate([centers[c] + rng.normal(size=(n, 8)) for c, n in enumerate(sizes)])
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    labels = np.repeat([f"c{c}" for c in range(5)], sizes)
    items = pd.DataFrame({"path": [f"{i}.jpg" for i in range(len(x))],
                          "source": [f"{i}.jpg" for i in range(len(x))], "label": labels})
    rel = build_relation("label", items)
    cfg = MineConfig(num_negatives=5, max_positives=4)
    res = mine_negatives(x, np.arange(len(x)), rel, cfg, searcher_for(x))
    assert res.retries > 0 and res.anchors_retried > 0 and res.k_max > res.k_initial
    assert (res.pairs.negatives_per_anchor == 5).all()
    ref = reference(x, items, "label", cfg)
    for i, a in enumerate(res.pairs.anchors):
        assert res.pairs.neg_ids[i].tolist() == ref[int(a)]


def test_margin_with_negative_positive_scores() -> None:
    # anchor 0 and its positive 1 point away from each other (score -0.6)
    x = np.array([[1, 0], [-0.6, 0.8], [-0.5, 0.866], [-0.8, 0.6], [0.0, 1.0], [-1, 0]],
                 dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    items = pd.DataFrame({"path": [f"{i}.jpg" for i in range(6)],
                          "source": ["a", "a", "b", "c", "d", "e"],
                          "label": [None] * 6})
    rel = build_relation("instance", items)
    cfg = MineConfig(num_negatives=3, range_max=5, relative_margin=0.5)
    res = mine_negatives(x, pd.factorize(items["source"])[0], rel, cfg, searcher_for(x))
    row = res.pairs.anchors.tolist().index(0)
    ref = float(x[0] @ x[1])
    assert ref == pytest.approx(-0.6, abs=1e-6)
    # allowed: score <= -0.6 - 0.5 * 0.6 = -0.9 -> only item 5 (score -1)
    assert [v for v in res.pairs.neg_ids[row] if v >= 0] == [5]
    # a naive pos * (1 - m) threshold would be -0.3 and let -0.5 and -0.8 through
    assert res.removed["relative_margin"] >= 2


def test_short_anchors_are_kept_and_counted(store) -> None:
    x = store.vectors(np.float32)
    rel = build_relation("instance", store.items)
    cfg = MineConfig(num_negatives=5, min_score=0.9)
    res = mine_negatives(x, store.source_codes(), rel, cfg, searcher_for(x))
    per = res.pairs.negatives_per_anchor
    stats = summary_stats(res, 5, True)
    assert len(res.pairs.anchors) == store.count  # nobody dropped
    assert stats["anchors_short"] == int((per < 5).sum()) > 0
    assert stats["negatives"] == int(per.sum())
    assert (res.pairs.neg_scores[res.pairs.neg_ids >= 0] >= 0.9).all()


@pytest.mark.parametrize("sampling", ["random", "softmax"])
def test_sampling_reproducible_and_in_window(store, sampling: str) -> None:
    x = store.vectors(np.float32)
    rel = build_relation("instance", store.items)
    cfg = MineConfig(num_negatives=4, range_min=1, range_max=20, sampling=sampling, seed=7,
                     sampling_temperature=0.1)
    src = store.source_codes()
    a = mine_negatives(x, src, rel, cfg, searcher_for(x))
    b = mine_negatives(x, src, rel, MineConfig(**{**cfg.__dict__, "batch_size": 7}),
                       searcher_for(x))
    np.testing.assert_array_equal(a.pairs.neg_ids, b.pairs.neg_ids)
    c = mine_negatives(x, src, rel, MineConfig(**{**cfg.__dict__, "seed": 8}), searcher_for(x))
    assert (a.pairs.neg_ids != c.pairs.neg_ids).any()
    ranks = a.pairs.neg_ranks
    assert ((ranks >= 1) & (ranks < 20)).all()
    assert (np.diff(ranks, axis=1) > 0).all()  # distinct, in rank order
    window = reference(x, store.items, "instance",
                       MineConfig(num_negatives=19, range_min=1, range_max=20))
    for i, anc in enumerate(a.pairs.anchors):
        assert set(a.pairs.neg_ids[i].tolist()) <= set(window[int(anc)])


def test_softmax_sampling_follows_the_softmax() -> None:
    """First-pick frequency over many anchors ~ exp(s/T) / sum exp(s/T).

    600 sources of two identical views at e0 (anchor + positive) share three
    candidates with scores 0.9, 0.6, 0.3; --max-score 0.99 removes the other anchors.
    """
    m = 600
    e0 = np.array([1.0, 0.0])
    cand = np.array([[0.9, np.sqrt(1 - 0.81)], [0.6, 0.8], [0.3, np.sqrt(1 - 0.09)]])
    x = np.concatenate([np.tile(e0, (2 * m, 1)), cand]).astype(np.float32)
    sources = np.concatenate([np.repeat(np.arange(m), 2), [m, m + 1, m + 2]])
    items = pd.DataFrame({"path": [f"{i}" for i in range(len(x))],
                          "source": sources.astype(str), "label": [None] * len(x)})
    rel = build_relation("instance", items)
    t = 0.2
    cfg = MineConfig(num_negatives=1, range_max=3, sampling="softmax", sampling_temperature=t,
                     max_score=0.99, seed=11)
    res = mine_negatives(x, sources, rel, cfg, searcher_for(x))
    first = res.pairs.neg_ids[: 2 * m, 0] - 2 * m
    counts = np.bincount(first, minlength=3) / (2 * m)
    s = np.array([0.9, 0.6, 0.3])
    want = np.exp(s / t) / np.exp(s / t).sum()  # 0.786, 0.175, 0.039
    np.testing.assert_allclose(counts, want, atol=0.04)


def test_low_temperature_softmax_is_top(store) -> None:
    x = store.vectors(np.float32)
    rel = build_relation("instance", store.items)
    src = store.source_codes()
    top = mine_negatives(x, src, rel, MineConfig(range_max=30), searcher_for(x))
    cold = mine_negatives(x, src, rel, MineConfig(range_max=30, sampling="softmax",
                                                  sampling_temperature=1e-6), searcher_for(x))
    np.testing.assert_array_equal(top.pairs.neg_ids, cold.pairs.neg_ids)


def test_tiny_temperature_softmax_is_top(store) -> None:
    """1/T overflows below T ~ 5.6e-309: the keys are still finite and the limit is top
    (it used to give inf keys, a RuntimeWarning and no negative at all)."""
    x = store.vectors(np.float32)
    rel = build_relation("instance", store.items)
    src = store.source_codes()
    top = mine_negatives(x, src, rel, MineConfig(range_max=30), searcher_for(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cold = mine_negatives(x, src, rel, MineConfig(range_max=30, sampling="softmax",
                                                      sampling_temperature=1e-309),
                              searcher_for(x))
    assert (top.pairs.neg_ids >= 0).any()
    np.testing.assert_array_equal(top.pairs.neg_ids, cold.pairs.neg_ids)


@pytest.mark.parametrize("t", [0.1, 1.0, 7.0])
def test_softmax_keys_keep_the_old_order(store, monkeypatch, t: float) -> None:
    """The overflow-free keys pick the very ids the old -(s / T + G) keys picked."""
    x = store.vectors(np.float32)
    rel = build_relation("instance", store.items)
    src = store.source_codes()
    cfg = MineConfig(num_negatives=4, range_max=25, sampling="softmax",
                     sampling_temperature=t, seed=13)
    new = mine_negatives(x, src, rel, cfg, searcher_for(x))

    def old(scores: np.ndarray, u: np.ndarray, temperature: float) -> np.ndarray:
        return -(scores.astype(np.float64) / temperature - np.log(-np.log(u)))
    monkeypatch.setattr(selection, "softmax_keys", old)
    was = mine_negatives(x, src, rel, cfg, searcher_for(x))
    assert (was.pairs.neg_ids >= 0).sum() > 100
    np.testing.assert_array_equal(new.pairs.neg_ids, was.pairs.neg_ids)


def test_easy_negatives_uniform_non_positives(store) -> None:
    x = store.vectors(np.float32)
    rel = build_relation("label", store.items)
    cfg = MineConfig(hard=False, num_negatives=5, seed=3)
    src = store.source_codes()
    res = mine_negatives(x, src, rel, cfg)
    again = mine_negatives(x, src, rel, MineConfig(**{**cfg.__dict__, "batch_size": 5}))
    np.testing.assert_array_equal(res.pairs.neg_ids, again.pairs.neg_ids)
    labels = store.items["label"].to_numpy()
    p = res.pairs
    assert (p.negatives_per_anchor == 5).all()
    for i, a in enumerate(p.anchors):
        negs = p.neg_ids[i]
        assert len(set(negs.tolist())) == 5
        assert all(labels[n] != labels[a] for n in negs)
    assert (p.neg_ranks == -1).all()
    # uniform: easy negatives are far less similar than hard ones on average
    hard = mine_negatives(x, src, rel, MineConfig(num_negatives=5), searcher_for(x))
    assert np.nanmean(p.neg_scores) < np.nanmean(hard.pairs.neg_scores) - 0.2
    # every non-positive item gets drawn by someone
    assert len(np.unique(p.neg_ids)) > 0.9 * store.count


def test_easy_negatives_when_almost_everything_is_a_positive() -> None:
    # 20 items, 19 share a label; the odd one is the only negative for them
    x = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    items = pd.DataFrame({"path": [f"{i}" for i in range(20)], "source": [f"{i}" for i in
                          range(20)], "label": ["a"] * 19 + ["b"]})
    rel = build_relation("label", items)
    res = mine_negatives(x, np.arange(20), rel, MineConfig(hard=False, num_negatives=3))
    assert (res.pairs.neg_ids[:, 0] == 19).all()
    assert (res.pairs.neg_ids[:, 1:] == -1).all()


@pytest.mark.parametrize("odd", [3, 0])
def test_easy_negatives_of_a_class_of_all_but_a_few_rows_come_without_draws(odd: int) -> None:
    """Found 2026-12-07: with the label relation and a class of all but a few rows (or
    of every row), each of its anchors drew up to 16 x N candidates to find the few valid
    ones or none (6,000 rows: 170-200 s and 1.2 GB for `mine --relation label`); those few
    are its candidates at once now, the same sets the draws found, in an order drawn
    from the seed."""
    n = 400
    x = np.random.default_rng(0).normal(size=(n, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = np.array(["b"] * odd + ["a"] * (n - odd), dtype=object)
    items = pd.DataFrame({"path": [f"{i}" for i in range(n)],
                          "source": [f"s{i // 2}" for i in range(n)], "label": labels})
    rel = build_relation("label", items)
    src = np.arange(n) // 2
    cfg = MineConfig(hard=False, num_negatives=5, seed=1)
    res = mine_negatives(x, src, rel, cfg)
    assert res.anchors_retried == 0  # 400 - odd before: every big-class anchor drew again
    again = mine_negatives(x, src, rel, MineConfig(**{**cfg.__dict__, "batch_size": 7}))
    np.testing.assert_array_equal(res.pairs.neg_ids, again.pairs.neg_ids)
    p = res.pairs
    for i, a in enumerate(p.anchors):
        got = {int(v) for v in p.neg_ids[i] if v >= 0}
        if labels[a] == "a":
            assert got == {j for j in range(odd) if src[j] != src[a]}
        else:
            assert len(got) == 5 and all(labels[v] == "a" for v in got)


def test_easy_negatives_under_the_label_relation_draw_what_they_need(monkeypatch) -> None:
    """Found 2026-12-07: easy negatives under the label relation fetched a class-sized k
    of draws first (a search's depth: its class fetched then dropped), 13,000 draws an
    anchor on 20,000 rows of four classes (55 s, 1.2 GB); uniform draws meet the class
    only as often as its share, so the first k is the window over the valid share. The
    draws come in the same order whatever their number: the table is the one the
    class-sized k gave."""
    n = 2000
    x = np.random.default_rng(0).normal(size=(n, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    items = pd.DataFrame({"path": [f"{i}" for i in range(n)],
                          "source": [f"s{i // 2}" for i in range(n)],
                          "label": [f"c{(i // 2) % 4}" for i in range(n)]})
    rel = build_relation("label", items)
    src = np.arange(n) // 2
    cfg = MineConfig(hard=False, num_negatives=5, seed=2)
    res = mine_negatives(x, src, rel, cfg)
    assert res.k_initial <= 64  # 1,024 + 500 before: the class and the median class
    real = selection.initial_k
    monkeypatch.setattr(selection, "initial_k", lambda *a, **k: np.full(
        len(a[3]) - 1, 1600, np.int64))
    import pairkit.mine.hard_negatives as hn

    monkeypatch.setattr(hn, "initial_k", selection.initial_k)
    deep = mine_negatives(x, src, rel, cfg)
    monkeypatch.setattr(hn, "initial_k", real)
    assert deep.k_initial == 1600
    for name in ("neg_ids", "neg_scores", "positives"):
        np.testing.assert_array_equal(getattr(res.pairs, name), getattr(deep.pairs, name))


def few_passing_case(passing: tuple[int, ...], seen: dict[str, int], n: int = 400
                     ) -> tuple[np.ndarray, np.ndarray, object, object]:
    """``(x, sources, relation, filter)``: ``n`` random rows, two views a source, and a
    false-negative filter that flags every row but ``passing``, adding the candidates
    it judges to ``seen["judged"]``."""
    x = np.random.default_rng(0).normal(size=(n, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    items = pd.DataFrame({"path": [f"{i}" for i in range(n)],
                          "source": [f"s{i // 2}" for i in range(n)]})

    def flag_all_but(anchors, cand, scores, ref, positives):  # noqa: ANN001, ANN202
        seen["judged"] += int((cand >= 0).sum())
        flags = (cand >= 0) & ~np.isin(cand, passing)
        return flags, np.where(flags, "all", None)

    return x, np.arange(n) // 2, build_relation("instance", items), flag_all_but


def assert_first_met(res, src: np.ndarray, passing: tuple[int, ...], cfg: MineConfig,  # noqa: ANN001
                     n: int) -> None:
    """Each anchor's negatives are the first valid rows its 16 x N draws meet, in that
    order (every row met with ``--fn-mode keep``), and under attract its attracted rows
    the first K flagged ones."""
    K, p = cfg.num_negatives, res.pairs
    for i, a in enumerate(p.anchors):
        draws = selection.drop_repeats(selection.easy_candidates(
            np.array([a]), 16 * n, n, cfg.seed))[0]
        met = [int(j) for j in draws if j >= 0 and src[j] != src[a]]
        want = [j for j in met if cfg.fn_mode == "keep" or j in passing][:K]
        assert [int(v) for v in p.neg_ids[i] if v >= 0] == want
        if cfg.fn_mode == "attract":
            flagged = [j for j in met if j not in passing][:K]
            assert [int(v) for v in p.fn_ids[p.fn_rows == i]] == flagged


@pytest.mark.parametrize("mode", ["eliminate", "attract"])
@pytest.mark.parametrize("passing", [(), (7, 100, 101, 250)])
def test_easy_negatives_stop_drawing_once_no_undrawn_row_could_pass(
        mode: str, passing: tuple[int, ...]) -> None:
    """Found by a mine bug hunt (2026-12-07): under a false-negative filter that nothing
    (or almost nothing) passes, every easy anchor drew again 4x as many until 16 x N
    draws (k 6,400 on 400 rows; 75 s on 2,000 rows). Once the next draws would be more
    than the rows, an anchor whose unmet rows are all invalid stops: its later draws
    could only meet those rows. The negatives (and attracted rows) are still the first
    valid (flagged) rows of its 16 x N draws, in the order they are met."""
    n, K = 400, 5
    seen = {"judged": 0}
    x, src, rel, flag_all_but = few_passing_case(passing, seen, n)
    cfg = MineConfig(hard=False, num_negatives=K, seed=1, fn_mode=mode)
    res = mine_negatives(x, src, rel, cfg, fn_filter=flag_all_but)
    if not passing:  # (a row that passes, not met yet, is still drawn for)
        assert res.k_max <= n  # 16 x 400 = 6,400 before
        assert seen["judged"] < 2 * n * n  # 7,600 x 400 = 3.0 M before
    assert_first_met(res, src, passing, cfg, n)


@pytest.mark.parametrize("mode", ["eliminate", "attract", "keep"])
def test_easy_negatives_that_a_filter_passes_few_of_are_drawn_for_alone(
        monkeypatch, mode: str) -> None:
    """Found by a bug hunt (2026-12-08): under a false-negative filter that passes a few
    rows (fewer than K), an anchor that had not met them all when the next draws would
    outnumber the rows drew 4x as many again, up to 16 x N, each round sorted and judged
    whole (400 rows, these four passing: 2,375 draws and 1,166 candidates judged an
    anchor, k up to 6,400; 4,000 rows: 29 s). Now the rows not met yet are judged once
    and the later draws are only looked up for those that could still be taken, until
    they are met: the same table (the first valid rows of the 16 x N draws, in the order
    they are met; attracted rows too), far fewer draws and judgements."""
    import pairkit.mine.blocks as blocks
    import pairkit.mine.easy_left as easy_left

    n, K, passing = 400, 5, (7, 100, 101, 250)
    seen = {"judged": 0, "draws": 0}
    x, src, rel, flag_all_but = few_passing_case(passing, seen, n)
    real = selection.easy_candidates

    def counted(anchors, m, *args, **kwargs):  # noqa: ANN001, ANN202
        out = real(anchors, m, *args, **kwargs)
        seen["draws"] += out.size
        return out

    for module in (blocks, easy_left):
        if hasattr(module, "easy_candidates"):
            monkeypatch.setattr(module, "easy_candidates", counted)

    cfg = MineConfig(hard=False, num_negatives=K, seed=1, fn_mode=mode)
    res = mine_negatives(x, src, rel, cfg, fn_filter=flag_all_but)
    assert seen["draws"] < 4 * n * n  # 2,375 x 400 = 950,000 before (keep: 2,034 x 400)
    assert seen["judged"] < 2 * n * n  # 1,166 x 400 = 466,535 before
    assert res.k_max < 16 * n  # 6,400 before
    assert_first_met(res, src, passing, cfg, n)


def test_fn_filter_hook_eliminate_keep_attract(store) -> None:
    x = store.vectors(np.float32)
    rel = build_relation("instance", store.items)
    src = store.source_codes()
    seen = {}

    def flag_multiple_of_3(anchors, cand, scores, ref, positives):
        seen["excluded_passed_as_minus_one"] = not (cand == anchors[:, None]).any()
        seen["positives"] = len(positives) == len(anchors)
        flags = (cand >= 0) & (cand % 3 == 0)
        reasons = np.where(flags, "label", None).astype(object)
        return flags, reasons

    elim = mine_negatives(x, src, rel, MineConfig(), searcher_for(x), flag_multiple_of_3)
    assert seen == {"excluded_passed_as_minus_one": True, "positives": True}
    negs = elim.pairs.neg_ids[elim.pairs.neg_ids >= 0]
    assert (negs % 3 != 0).all() and (elim.pairs.negatives_per_anchor == 5).all()
    assert elim.removed["false_negative"] > 0 and elim.fn_flagged["label"] > 0
    # the selection equals top-K over the candidates that survive the filter
    plain = mine_negatives(x, src, rel, MineConfig(range_max=40), searcher_for(x))
    for i in range(len(plain.pairs.anchors)):
        want = [v for v in plain.pairs.neg_ids[i] if v % 3 != 0][:5]
        assert elim.pairs.neg_ids[i].tolist()[: len(want)] == want

    keep = mine_negatives(x, src, rel, MineConfig(fn_mode="keep"), searcher_for(x),
                          flag_multiple_of_3)
    top = mine_negatives(x, src, rel, MineConfig(), searcher_for(x))
    np.testing.assert_array_equal(keep.pairs.neg_ids, top.pairs.neg_ids)
    np.testing.assert_array_equal(keep.pairs.neg_flags, keep.pairs.neg_ids % 3 == 0)

    att = mine_negatives(x, src, rel, MineConfig(fn_mode="attract"), searcher_for(x),
                         flag_multiple_of_3)
    np.testing.assert_array_equal(att.pairs.neg_ids, elim.pairs.neg_ids)
    assert len(att.pairs.fn_ids) > 0 and (att.pairs.fn_ids % 3 == 0).all()
    assert set(att.pairs.fn_reasons.tolist()) == {"label"}


def test_real_false_negative_rules(store) -> None:
    from pairkit.mine.false_negatives import (
        FalseNegativeConfig,
        build_context,
        flag_false_negatives,
    )

    x = store.vectors(np.float32)
    rel = build_relation("instance", store.items)
    src = store.source_codes()
    fcfg = FalseNegativeConfig(rules=("label",))
    ctx = build_context(x, store.labels(), src, fcfg)

    def hook(a, c, s, r, pos):
        return flag_false_negatives(ctx, a, c, s, r, fcfg, positives=pos)

    res = mine_negatives(x, src, rel, MineConfig(), searcher_for(x), hook)
    labels = store.items["label"].to_numpy()
    for i, a in enumerate(res.pairs.anchors):
        assert all(labels[n] != labels[a] for n in res.pairs.neg_ids[i] if n >= 0)
    assert res.fn_flagged["label"] == res.removed["false_negative"] > 0


def test_summary_stats_by_hand() -> None:
    x = np.eye(6, dtype=np.float32)[[0, 0, 1, 2, 3, 4]] + 0.0
    x[1] = [0.8, 0.6, 0, 0, 0, 0]
    x[2] = [0.6, 0.8, 0, 0, 0, 0]
    x[3] = [0.0, 0.6, 0.8, 0, 0, 0]
    items = pd.DataFrame({"path": list("abcdef"), "source": list("aabcde"),
                          "label": [None] * 6})
    rel = build_relation("instance", items)
    res = mine_negatives(x, pd.factorize(items["source"])[0], rel,
                         MineConfig(num_negatives=2), searcher_for(x))
    st = summary_stats(res, 2, True)
    assert st["anchors"] == 2 and st["negatives"] == 4
    assert st["rank_histogram"]["0"] == 2 and st["rank_histogram"]["1"] == 2
    # anchor 0: neighbours 0 (self), 1 (positive), 2, 3 -> self 1, positive 1 each
    assert st["removed"]["self"] == 2 and st["removed"]["positive"] == 2
    assert res.pairs.neg_ids.tolist() == [[2, 3], [2, 3]]
    assert st["pos_score"]["q50"] == pytest.approx(0.8, abs=1e-6)


def test_bad_options() -> None:
    cases = [
        (MineConfig(num_negatives=0), "--num-negatives must be >= 1, got 0"),
        (MineConfig(range_min=5, range_max=5), "--range-min must be < --range-max, got 5 >= 5"),
        (MineConfig(num_negatives=12, range_min=0, range_max=10),
         "--num-negatives must be <= range-max - range-min, got 12"),
        (MineConfig(sampling="best"), "--sampling must be one of"),
        (MineConfig(sampling_temperature=0), "--sampling-temperature must be > 0"),
        (MineConfig(min_score=0.5, max_score=0.1), "--min-score must be <= --max-score"),
        (MineConfig(absolute_margin=-1), "--absolute-margin must be >= 0"),
        (MineConfig(relative_margin=-0.5), "--relative-margin must be >= 0"),
        (MineConfig(max_positives=0), "--max-positives must be >= 1, got 0"),  # 4a CF10
        (MineConfig(batch_size=0), "--batch-size must be >= 1, got 0"),
        (MineConfig(positive="strongest"), "--positive must be one of"),
        (MineConfig(fn_mode="drop"), "--fn-mode must be one of"),
    ]
    for cfg, msg in cases:
        with pytest.raises(UsageError, match=msg):
            validate_config(cfg, 100)
    with pytest.raises(PairkitError, match=r"row count \(10\), got 10"):
        validate_config(MineConfig(num_negatives=10), 10)


def test_empty_relation_is_an_error() -> None:
    x = np.eye(4, dtype=np.float32)
    items = pd.DataFrame({"path": list("abcd"), "source": list("abcd"), "label": [None] * 4})
    rel = build_relation("instance", items)
    with pytest.raises(PairkitError, match="gives no item a positive"):
        mine_negatives(x, np.arange(4), rel, MineConfig(num_negatives=1), searcher_for(x))


def test_hash_uniform_is_uniform_and_deterministic() -> None:
    u = hash_uniform(3, np.arange(20000), np.arange(20000) * 7)
    assert ((u > 0) & (u < 1)).all()
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    np.testing.assert_array_equal(u, hash_uniform(3, np.arange(20000), np.arange(20000) * 7))
    assert (u != hash_uniform(4, np.arange(20000), np.arange(20000) * 7)).mean() > 0.99


def test_hash_uniform_is_splitmix_of_the_whole_seed() -> None:
    """Mutation audit 4a (RN1): every bit of a 64-bit seed counts (seed 2**32 is not seed
    0: ``--seed`` takes up to 2**63 - 1), checked against splitmix64 in Python integers."""
    mask, g = 2**64 - 1, 0x9E3779B97F4A7C15
    m1, m2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB

    def mix(x: int) -> int:
        x = (x + g) & mask
        x = ((x ^ (x >> 30)) * m1) & mask
        x = ((x ^ (x >> 27)) * m2) & mask
        return x ^ (x >> 31)

    def plain(seed: int, a: int, b: int) -> float:
        x = mix(((a & mask) * g + seed * m2) & mask) ^ (b & mask)
        return ((mix((x + g) & mask) >> 11) + 0.5) / 2**53

    a, b = np.array([0, 1, 7, -1, 2**40]), np.array([0, 5, 3, 9, -2])
    for seed in (0, 3, 2**32, 2**32 + 3, 2**63 - 1):
        got = hash_uniform(seed, a, b)
        assert got.tolist() == [plain(seed, int(x), int(y)) for x, y in zip(a, b, strict=True)]
    assert (hash_uniform(2**32, a, b) != hash_uniform(0, a, b)).all()
