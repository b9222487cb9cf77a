"""The torch linear probe against scikit-learn's LogisticRegression."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.eval.linear_probe import (
    fit_logistic,
    linear_probe,
    mean_per_class_recall,
    predict_logistic,
    top1_and_log_loss,
)


def _blobs(seed: int, n: int, classes: int = 4, d: int = 10, noise: float = 1.5):
    centres = np.random.default_rng(100).normal(size=(classes, d))  # shared by all seeds
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    x = centres[y] + noise * rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), y


@pytest.mark.parametrize("weight_decay", [1e-3, 1e-2])
def test_matches_sklearn_logistic_regression(weight_decay: float) -> None:
    from sklearn.linear_model import LogisticRegression

    x, y = _blobs(0, 600)
    xt, yt = _blobs(5, 300)
    w, b = fit_logistic(x, y, 4, weight_decay, max_iter=500, tolerance=1e-9)
    ours = predict_logistic(xt, w, b)
    sk = LogisticRegression(C=1.0 / (weight_decay * len(x)), max_iter=5000, tol=1e-10)
    sk.fit(x, y)
    theirs = sk.predict(xt)
    assert np.mean(ours == theirs) >= 0.99
    assert abs(np.mean(ours == yt) - np.mean(theirs == yt)) <= 0.01
    # same convex objective -> same weights (up to the softmax's shared shift)
    ours_logits = xt @ w + b
    sk_logits = sk.decision_function(xt)
    np.testing.assert_allclose(ours_logits - ours_logits.mean(1, keepdims=True),
                               sk_logits - sk_logits.mean(1, keepdims=True), atol=2e-2)


def test_two_classes_match_sklearns_binomial_fit_at_twice_the_c() -> None:
    """hunt-v F1: with two classes scikit-learn fits one weight vector v (binomial), the
    softmax two, w1 = -w0 = v / 2 at the optimum, whose penalty lambda/2 (|w0|^2 + |w1|^2)
    = lambda/4 |v|^2: the same objective at C = 2 / (lambda n), not 1 / (lambda n) (the
    docs said the latter for every class count)."""
    from sklearn.linear_model import LogisticRegression

    x, y = _blobs(0, 400, classes=2, noise=2.0)
    xt, _ = _blobs(5, 200, classes=2, noise=2.0)
    wd = 1e-2
    w, b = fit_logistic(x, y, 2, wd, max_iter=500, tolerance=1e-10)
    ours = xt @ w + b
    sk = LogisticRegression(C=2.0 / (wd * len(x)), max_iter=5000, tol=1e-12).fit(x, y)
    np.testing.assert_allclose(ours[:, 1] - ours[:, 0], sk.decision_function(xt), atol=2e-3)
    far = LogisticRegression(C=1.0 / (wd * len(x)), max_iter=5000, tol=1e-12).fit(x, y)
    assert np.abs(ours[:, 1] - ours[:, 0] - far.decision_function(xt)).max() > 0.05


def test_probe_selects_weight_decay_and_handles_absent_classes() -> None:
    x, y = _blobs(1, 400, classes=3, noise=2.5)
    groups = np.arange(400) // 2
    xt, yt = _blobs(2, 100, classes=3, noise=2.5)
    yt = yt.copy()
    yt[:10] = 7  # a class the training side never saw
    res = linear_probe(x, y, groups, xt, yt, weight_decays=(1e-4, 1e-2), max_iter=200)
    assert res.weight_decay in (1e-4, 1e-2)
    assert set(res.val_top1) == set(res.val_loss) == {1e-4, 1e-2}
    # chosen by the validation cross-entropy (not its top-1)
    assert res.weight_decay == min(res.val_loss, key=lambda wd: (res.val_loss[wd], -wd))
    assert not (res.predictions == 7).any()
    assert res.top1 == pytest.approx(np.mean(res.predictions == yt))
    assert res.mean_per_class_recall == pytest.approx(mean_per_class_recall(res.predictions, yt))
    assert res.top1 > 0.5


def test_mean_per_class_recall_by_hand() -> None:
    true = np.array([0, 0, 0, 1, 2, 2])
    pred = np.array([0, 1, 0, 1, 0, 0])
    assert mean_per_class_recall(pred, true) == pytest.approx((2 / 3 + 1 + 0) / 3)


def test_mean_log_loss_against_sklearn_and_by_hand() -> None:
    from sklearn.metrics import log_loss

    x, y = _blobs(3, 50)
    rng = np.random.default_rng(4)
    w = rng.normal(size=(10, 4)).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)
    z = (x @ w + b).astype(np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    want = log_loss(y, p, labels=[0, 1, 2, 3])

    def mean_log_loss(*args, **kw):
        return top1_and_log_loss(*args, **kw)[1]

    assert mean_log_loss(x, y, w, b) == pytest.approx(want, rel=1e-6)
    assert mean_log_loss(x, y, w, b, chunk=7) == pytest.approx(mean_log_loss(x, y, w, b),
                                                               rel=1e-9)
    # the top-1 of the same pass is predict_logistic's
    for chunk in (7, 65536):
        assert top1_and_log_loss(x, y, w, b, chunk=chunk)[0] == np.mean(
            predict_logistic(x, w, b) == y)
    # one row, two classes, logits (0, log 3): -log(1/4) for class 0, -log(3/4) for 1
    one = np.ones((1, 1), np.float32)
    wb = (np.array([[0.0, np.log(3.0)]], np.float32), np.zeros(2, np.float32))
    assert mean_log_loss(one, np.array([0]), *wb) == pytest.approx(np.log(4.0), rel=1e-6)
    assert mean_log_loss(one, np.array([1]), *wb) == pytest.approx(np.log(4 / 3), rel=1e-6)


def test_row_weights_equal_repeated_rows() -> None:
    """Integer row weights give the fit (and the validation cross-entropy) of the rows
    repeated that many times: the balanced probe's objective, by an independent route."""
    from pairkit.eval.linear_probe import balanced_weights

    x, y = _blobs(3, 300, classes=3)
    keep = (y != 2) | (np.arange(len(y)) % 4 == 0)  # class 2 a quarter of its size
    x, y = x[keep], y[keep]
    weights = balanced_weights(y)
    counts = np.bincount(y)
    assert np.allclose(weights, len(y) / (3 * counts[y])) and weights.mean() == pytest.approx(1)
    # repeats proportional to the weights: every class repeated up to the counts' lcm
    reps = np.lcm.reduce(counts) // counts[y]
    assert np.allclose(reps / reps.sum(), weights / weights.sum())
    big_x, big_y = np.repeat(x, reps, axis=0), np.repeat(y, reps)
    w1, b1 = fit_logistic(x, y, 3, 1e-3, max_iter=500, tolerance=1e-9, row_weights=weights)
    w2, b2 = fit_logistic(big_x, big_y, 3, 1e-3, max_iter=500, tolerance=1e-9)
    np.testing.assert_allclose(x @ w1 + b1, x @ w2 + b2, atol=5e-3)  # L-BFGS's stop
    _, loss1 = top1_and_log_loss(x, y, w1, b1, row_weights=weights)
    _, loss2 = top1_and_log_loss(big_x, big_y, w1, b1)
    assert loss1 == pytest.approx(loss2, rel=1e-6)


def test_balanced_probe_on_balanced_classes_is_the_plain_one() -> None:
    x, y = _blobs(4, 240, classes=3)
    y = np.arange(240) % 3  # exactly 80 rows a class: every weight 1
    groups = np.arange(240) // 2
    xt, yt = _blobs(6, 90, classes=3)
    plain = linear_probe(x, y, groups, xt, yt, weight_decays=(1e-4, 1e-2), max_iter=100)
    even = linear_probe(x, y, groups, xt, yt, weight_decays=(1e-4, 1e-2), max_iter=100,
                        balanced=True)
    assert even.weight_decay == plain.weight_decay
    np.testing.assert_array_equal(even.predictions, plain.predictions)


def test_balanced_probe_predicts_the_small_class_more_often() -> None:
    """Overlapping classes, one a tenth of the other: the plain probe's prior favours the
    large class; weighed the same, the small class is predicted more often and found
    more often."""
    x, y = _blobs(7, 1100, classes=2, noise=3.0)
    keep = (y == 0) | (np.arange(len(y)) % 10 == 0)
    x, y = x[keep], y[keep]
    groups = np.arange(len(y))
    xt, yt = _blobs(8, 400, classes=2, noise=3.0)
    plain = linear_probe(x, y, groups, xt, yt, weight_decays=(1e-3,))
    even = linear_probe(x, y, groups, xt, yt, weight_decays=(1e-3,), balanced=True)
    assert (even.predictions == 1).sum() > (plain.predictions == 1).sum()
    assert even.mean_per_class_recall > plain.mean_per_class_recall


def test_probe_without_a_validation_split_says_so() -> None:
    """Found by a bug hunt (2026-12-06): without a validation split the first decay was
    taken silently (and `eval` printed "lowest validation log-loss"). The result says
    why, and the fit is the first decay's on all references."""
    x, y = _blobs(3, 40, classes=2)
    xt, yt = _blobs(4, 20, classes=2)
    cases = [(np.zeros(40, dtype=np.int64), (1e-3, 1e-2), "fewer than 2 sources"),
             (np.arange(40), (1e-3,), "one weight decay given")]
    for groups, decays, why in cases:
        res = linear_probe(x, y, groups, xt, yt, weight_decays=decays, max_iter=100)
        assert why in res.unvalidated
        assert res.weight_decay == decays[0] and res.val_loss == {}
        w, b = fit_logistic(x, y, 2, decays[0], max_iter=100)
        np.testing.assert_array_equal(res.predictions, predict_logistic(xt, w, b))
    # a validation fifth drawn from the only two sources of class 1 leaves 1 class to fit
    y1 = np.zeros(40, dtype=np.int64)
    y1[:2] = 1
    groups = np.r_[0, 0, np.arange(1, 39)]  # class 1: one source of 2 views
    for seed in range(20):
        res = linear_probe(x, y1, groups, xt, yt, weight_decays=(1e-3, 1e-2), seed=seed,
                           max_iter=50)
        assert (res.unvalidated == "") == bool(res.val_loss)
        if res.unvalidated:
            assert res.unvalidated == ("the references less a validation part by source "
                                       "have 1 class")
            break
    else:
        raise AssertionError("no seed put class 1 in the validation part")
    res = linear_probe(x, y, np.arange(40), xt, yt, weight_decays=(1e-3, 1e-2), max_iter=50)
    assert res.unvalidated == "" and set(res.val_loss) == {1e-3, 1e-2}


def test_balanced_weights_are_balanced_within_each_part(monkeypatch) -> None:
    """hunt-v note: the weights were those of all training rows, sliced into the fit and
    validation parts, where the split by source moves the class shares: classes then
    weighed only about the same. Each weighted step (the path's fits, the validation
    cross-entropies, the last fit) must give every class present the same total weight."""
    import pairkit.eval.linear_probe as lp

    seen: list[tuple[np.ndarray, np.ndarray]] = []
    fit, loss = lp.fit_logistic, lp.top1_and_log_loss

    def fit_spy(x, y, *args, row_weights=None, **kw):  # noqa: ANN001, ANN002, ANN003
        seen.append((np.asarray(y), row_weights))
        return fit(x, y, *args, row_weights=row_weights, **kw)

    def loss_spy(x, y, w, b, row_weights=None, **kw):  # noqa: ANN001, ANN003
        seen.append((np.asarray(y), row_weights))
        return loss(x, y, w, b, row_weights=row_weights, **kw)

    monkeypatch.setattr(lp, "fit_logistic", fit_spy)
    monkeypatch.setattr(lp, "top1_and_log_loss", loss_spy)
    rng = np.random.default_rng(4)
    y = np.repeat([0, 1, 2], [150, 40, 10])
    x = (np.eye(6)[y] + 0.8 * rng.normal(size=(200, 6))).astype(np.float32)
    groups = rng.permutation(200) // 3  # sources of 3 rows, classes mixed across them
    lp.linear_probe(x, y, groups, x[:20], y[:20], weight_decays=(1e-3, 1e-2),
                    balanced=True, max_iter=50)
    assert len(seen) == 5  # two fits and two validations on the path, the last fit
    for labels, weights in seen:
        totals = np.bincount(labels, weights=weights)[np.unique(labels)]
        np.testing.assert_allclose(totals, totals[0], rtol=1e-12)


def test_probe_says_each_fit_and_fits_the_same() -> None:
    """``on_fit`` (eval's progress on a terminal, hunt-r 8): one line per fit of the
    validated path, strongest decay first, then the last fit at the chosen decay on all
    training rows; the result is the one without it."""
    from pairkit.eval.split import split_by_source

    x, y = _blobs(0, 300)
    groups = np.arange(300) // 2
    xt, yt = _blobs(1, 60)
    lines: list[str] = []
    said = linear_probe(x, y, groups, xt, yt, weight_decays=(1e-4, 1e-2), max_iter=50,
                        on_fit=lines.append)
    plain = linear_probe(x, y, groups, xt, yt, weight_decays=(1e-4, 1e-2), max_iter=50)
    assert (said.top1, said.weight_decay, said.val_loss) == (plain.top1, plain.weight_decay,
                                                              plain.val_loss)
    np.testing.assert_array_equal(said.predictions, plain.predictions)
    n_fit = int((~split_by_source(groups, 0.2, 0)).sum())
    assert lines == [f"linear probe: fit 1 of 3 (weight decay 0.01, {n_fit:,} rows x 4 "
                     "classes)",
                     f"linear probe: fit 2 of 3 (weight decay 0.0001, {n_fit:,} rows x 4 "
                     "classes)",
                     f"linear probe: fit 3 of 3 (weight decay {said.weight_decay:g}, 300 "
                     "rows x 4 classes)"]


def test_equal_validation_losses_choose_the_larger_decay(monkeypatch) -> None:
    """The lowest validation cross-entropy wins; equal ones go to the larger decay."""
    import pairkit.eval.linear_probe as lp

    x, y = _blobs(1, 120, classes=3)
    groups = np.arange(120) // 2
    decays = (1e-4, 1e-2, 1e-3)
    monkeypatch.setattr(lp, "top1_and_log_loss", lambda *a, **kw: (0.5, 1.0))
    res = lp.linear_probe(x, y, groups, x[:10], y[:10], weight_decays=decays, max_iter=20)
    assert res.val_loss == {d: 1.0 for d in decays} and res.weight_decay == 1e-2


def test_fit_chunks_hold_a_bounded_number_of_logits(monkeypatch) -> None:
    """fix-small: the fits took 65,536 rows a chunk whatever the class count (at 100
    classes 26 MB a logits buffer, four alive in the backward pass; the heap grew fit
    after fit: `eval --metrics linear` peaked at 1.46 GB on 80,000 x 256 references,
    docs/benchmarks.md). A chunk holds at most LOGITS_PER_CHUNK logits."""
    import torch

    import pairkit.eval.linear_probe as lp

    sizes: list[int] = []
    lse = torch.logsumexp

    def spy(logits, *args, **kw):  # noqa: ANN001, ANN002, ANN003
        sizes.append(logits.numel())
        return lse(logits, *args, **kw)

    monkeypatch.setattr(torch, "logsumexp", spy)
    x, y = _blobs(0, 2000, classes=4)
    n_classes = 1100  # codes 0-3 used, the rest never seen: 953 rows a chunk
    lp.fit_logistic(x, y, n_classes, 1e-2, max_iter=2)
    assert lp.chunk_rows(n_classes) == lp.LOGITS_PER_CHUNK // n_classes == 953
    assert sizes and max(sizes) <= lp.LOGITS_PER_CHUNK
    assert sorted(set(sizes)) == [(2000 - 2 * 953) * n_classes, 953 * n_classes]


@pytest.mark.parametrize("balanced", [False, True])
def test_probe_in_small_chunks_matches_the_one_chunk_reference(monkeypatch,
                                                               balanced: bool) -> None:
    """The probe with its rows in many chunks (LOGITS_PER_CHUNK made tiny) against the
    unchanged computation (one chunk for these sizes, as with 65,536 rows a chunk before):
    the same decay, predictions and figures, the weights within float tolerance."""
    import pairkit.eval.linear_probe as lp

    x, y = _blobs(1, 600, classes=4, noise=2.5)
    groups = np.arange(600) // 2
    xt, yt = _blobs(2, 300, classes=4, noise=2.5)
    args = (x, y, groups, xt, yt)
    kw = {"weight_decays": (1e-4, 1e-2), "max_iter": 300, "balanced": balanced}
    monkeypatch.setattr(lp, "LOGITS_PER_CHUNK", 65536 * 4)
    assert lp.chunk_rows(4) == 65536
    reference = lp.linear_probe(*args, **kw)
    w_ref, b_ref = lp.fit_logistic(x, y, 4, 1e-3, max_iter=300, tolerance=1e-9)
    monkeypatch.setattr(lp, "LOGITS_PER_CHUNK", 4 * 37)  # 37 rows a chunk
    chunked = lp.linear_probe(*args, **kw)
    w, b = lp.fit_logistic(x, y, 4, 1e-3, max_iter=300, tolerance=1e-9)
    np.testing.assert_allclose(xt @ w + b, xt @ w_ref + b_ref, atol=5e-3)  # L-BFGS stop
    assert chunked.weight_decay == reference.weight_decay
    np.testing.assert_array_equal(chunked.predictions, reference.predictions)
    assert (chunked.top1, chunked.mean_per_class_recall) == (reference.top1,
                                                              reference.mean_per_class_recall)
    for wd, loss in reference.val_loss.items():
        assert chunked.val_loss[wd] == pytest.approx(loss, rel=1e-4)  # the same stop
