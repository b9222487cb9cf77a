"""Every loss against explicit Python loops over hand-written tensors, and against
pytorch-metric-learning where it has the same loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pairkit.errors import PairkitError
from pairkit.train.losses import (
    LossConfig,
    batch_loss,
    debiased,
    hard,
    infonce,
    keep_input,
    supcon,
    triplet,
)


def unit(*angles_deg: float) -> torch.Tensor:
    """2-d unit vectors at the given angles, shape (n, 2)."""
    a = np.radians(angles_deg)
    return torch.tensor(np.stack([np.cos(a), np.sin(a)], axis=1), dtype=torch.float32)


def rand_unit(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    return torch.nn.functional.normalize(x, dim=-1)


def ref_multi_pos(rows: list[tuple[list[float], list[float]]], t: float) -> float:
    """Mean over rows of -1/|P| sum_p log(exp(p/t) / (sum_P exp + sum_N exp)); loops only."""
    total = 0.0
    for pos, neg in rows:
        den = sum(math.exp(s / t) for s in pos) + sum(math.exp(s / t) for s in neg)
        total += -sum(math.log(math.exp(s / t) / den) for s in pos) / len(pos)
    return total / len(rows)


def dot(u: torch.Tensor, v: torch.Tensor) -> float:
    return float(sum(float(x) * float(y) for x, y in zip(u, v, strict=True)))


# -- infonce -------------------------------------------------------------------------------


def test_infonce_hand_computed_two_pairs():
    # a1 = p1 = (1,0), a2 = p2 = (0,1), t = 1: each row is -log(e / (e + 1)) = log(1 + 1/e)
    a = unit(0, 90)
    loss = infonce.compute_loss_from_embeddings(a, a.clone(), temperature=1.0)
    assert float(loss) == pytest.approx(math.log(1 + math.exp(-1)), abs=1e-6)
    assert float(loss) == pytest.approx(0.3132617, abs=1e-6)


def test_infonce_with_mined_negatives_against_loops():
    a, p = unit(0, 100, 200), unit(20, 130, 170)
    n = torch.stack([unit(40, 300), unit(90, 95), unit(10, 250)])   # (3, 2, 2)
    valid = torch.tensor([[True, True], [True, False], [False, True]])
    t = 0.5
    rows = []
    for i in range(3):
        pos = [dot(a[i], p[i])]
        neg = [dot(a[i], p[j]) for j in range(3) if j != i]
        neg += [dot(a[i], n[i, k]) for k in range(2) if valid[i, k]]
        rows.append((pos, neg))
    got = infonce.compute_loss_from_embeddings(a, p, n, valid, temperature=t)
    assert float(got) == pytest.approx(ref_multi_pos(rows, t), abs=1e-5)


def test_infonce_groups_and_attract_against_loops():
    a, p = rand_unit(4, 5, seed=1), rand_unit(4, 5, seed=2)
    n = rand_unit(4, 2, 5, seed=3)
    groups = torch.tensor([0, 0, 1, 2])                   # pairs 0 and 1 share a source
    attract = torch.tensor([[False, True], [False, False], [True, True], [False, False]])
    t = 0.2
    rows = []
    for i in range(4):
        pos = [dot(a[i], p[i])] + [dot(a[i], n[i, k]) for k in range(2) if attract[i, k]]
        neg = [dot(a[i], p[j]) for j in range(4) if groups[j] != groups[i]]
        neg += [dot(a[i], n[i, k]) for k in range(2) if not attract[i, k]]
        rows.append((pos, neg))
    got = infonce.compute_loss_from_embeddings(a, p, n, None, attract, groups, temperature=t)
    assert float(got) == pytest.approx(ref_multi_pos(rows, t), abs=1e-5)


def test_infonce_leaves_out_positives_of_the_pairs_own_groups():
    """Found by a bug hunt (2026-12-06): the in-batch mask compared the other example's
    *anchor* group with the row's, so with a mined positive (another source) an anchor's
    own row or its other view, as another example's positive, was a negative (cosine 1
    in the denominator). A candidate p_j is left out when its group is the row anchor's
    or the row positive's; groups given as (B, 2): anchor's, positive's."""
    a, p = rand_unit(4, 5, seed=11), rand_unit(4, 5, seed=12)
    # pair 0: anchor of source 0, mined positive of source 1; pair 1: anchor of source 1,
    # positive a view of source 0 (anchor 0's own source); pair 2: source 2 with its own
    # view; pair 3: anchor of source 3, mined positive of source 2
    groups = torch.tensor([[0, 1], [1, 0], [2, 2], [3, 2]])
    t = 0.3
    for symmetric in (False, True):
        rows = []
        if not symmetric:
            for i in range(4):
                mine = {int(groups[i, 0]), int(groups[i, 1])}
                neg = [dot(a[i], p[j]) for j in range(4)
                       if j != i and int(groups[j, 1]) not in mine]
                rows.append(([dot(a[i], p[i])], neg))
        else:
            views = torch.cat([a, p])
            vg = torch.cat([groups[:, 0], groups[:, 1]])
            for r in range(8):
                i = r % 4
                mine = {int(groups[i, 0]), int(groups[i, 1])}
                partner = (r + 4) % 8
                neg = [dot(views[r], views[c]) for c in range(8)
                       if c not in (r, partner) and int(vg[c]) not in mine]
                rows.append(([dot(views[r], views[partner])], neg))
        got = infonce.compute_loss_from_embeddings(a, p, groups=groups, temperature=t,
                                                   symmetric=symmetric)
        assert float(got) == pytest.approx(ref_multi_pos(rows, t), abs=1e-5)
    # (B,) groups are both: the view pairs' behaviour is unchanged
    flat = torch.tensor([0, 0, 1, 2])
    both = torch.stack([flat, flat], dim=1)
    for symmetric in (False, True):
        assert float(infonce.compute_loss_from_embeddings(
            a, p, groups=flat, temperature=t, symmetric=symmetric)) == pytest.approx(
            float(infonce.compute_loss_from_embeddings(
                a, p, groups=both, temperature=t, symmetric=symmetric)), abs=1e-6)


def test_infonce_matches_pytorch_metric_learning_ntxent():
    pml = pytest.importorskip("pytorch_metric_learning.losses")
    a, p = rand_unit(8, 16, seed=4), rand_unit(8, 16, seed=5)
    labels = torch.arange(8)
    for t in (0.07, 0.5):
        ref = pml.NTXentLoss(temperature=t)
        # one direction: anchors against the batch's positives (a distinct ref_labels object:
        # pml drops the diagonal when ref_labels is labels)
        want = ref(a, labels, ref_emb=p, ref_labels=labels.clone())
        got = infonce.compute_loss_from_embeddings(a, p, temperature=t)
        assert float(got) == pytest.approx(float(want), abs=1e-5)
        # symmetric: SimCLR's NT-Xent over 2B views
        want = ref(torch.cat([a, p]), torch.cat([labels, labels]))
        got = infonce.compute_loss_from_embeddings(a, p, temperature=t, symmetric=True)
        assert float(got) == pytest.approx(float(want), abs=1e-5)


def test_infonce_symmetric_hard_negatives_count_for_both_views():
    a, p, n = rand_unit(3, 4, seed=6), rand_unit(3, 4, seed=7), rand_unit(3, 1, 4, seed=8)
    t = 0.3
    views = torch.cat([a, p])
    rows = []
    for r in range(6):
        i = r % 3
        partner = (r + 3) % 6
        pos = [dot(views[r], views[partner])]
        neg = [dot(views[r], views[c]) for c in range(6) if c % 3 != i]
        neg += [dot(views[r], n[i, 0])]
        rows.append((pos, neg))
    got = infonce.compute_loss_from_embeddings(a, p, n, temperature=t, symmetric=True)
    assert float(got) == pytest.approx(ref_multi_pos(rows, t), abs=1e-5)


# -- triplet ------------------------------------------------------------------------------


def test_triplet_hand_computed():
    # s_ap = cos 60 = 0.5; negatives at 90 deg (s=0) and 30 deg (s=0.866); margin 0.2
    a, p = unit(0), unit(60)
    n = torch.stack([unit(90, 30)])
    got = triplet.compute_loss_from_embeddings(a, p, n, margin=0.2)
    want = (max(0.0, 0.0 - 0.5 + 0.2) + max(0.0, math.cos(math.radians(30)) - 0.5 + 0.2)) / 2
    assert float(got) == pytest.approx(want, abs=1e-6)
    assert float(got) == pytest.approx(0.2830127, abs=1e-6)


def test_triplet_mined_and_batch_hard_against_loops():
    a, p, n = rand_unit(5, 6, seed=9), rand_unit(5, 6, seed=10), rand_unit(5, 3, 6, seed=11)
    valid = torch.ones(5, 3, dtype=torch.bool)
    valid[1, 2] = False
    m = 0.3
    terms = [max(0.0, dot(a[i], n[i, k]) - dot(a[i], p[i]) + m)
             for i in range(5) for k in range(3) if valid[i, k]]
    got = triplet.compute_loss_from_embeddings(a, p, n, valid, margin=m)
    assert float(got) == pytest.approx(sum(terms) / len(terms), abs=1e-6)
    # no mined negatives: batch-hard over the in-batch positives of other pairs
    terms = [max(0.0, max(dot(a[i], p[j]) for j in range(5) if j != i) - dot(a[i], p[i]) + m)
             for i in range(5)]
    got = triplet.compute_loss_from_embeddings(a, p, margin=m)
    assert float(got) == pytest.approx(sum(terms) / len(terms), abs=1e-6)


def test_triplet_rows_without_mined_negatives_fall_back_to_batch_hard():
    """Found by a bug hunt (2026-12-06): one row of the batch with a mined negative left
    every other row without any negative (no gradient at all) instead of batch-hard."""
    a, p, n = rand_unit(6, 8, seed=21), rand_unit(6, 8, seed=22), rand_unit(6, 2, 8, seed=23)
    valid = torch.zeros(6, 2, dtype=torch.bool)
    valid[0, 0] = True   # row 0: one mined negative
    valid[3] = True      # row 3: two
    m = 0.4
    terms = [max(0.0, dot(a[0], n[0, 0]) - dot(a[0], p[0]) + m)]
    terms += [max(0.0, dot(a[3], n[3, k]) - dot(a[3], p[3]) + m) for k in range(2)]
    terms += [max(0.0, max(dot(a[i], p[j]) for j in range(6) if j != i) - dot(a[i], p[i]) + m)
              for i in (1, 2, 4, 5)]
    a.requires_grad_(True)
    got = triplet.compute_loss_from_embeddings(a, p, n, valid, margin=m)
    assert float(got.detach()) == pytest.approx(sum(terms) / len(terms), abs=1e-6)
    got.backward()
    # the rows without a mined negative learn from their hardest in-batch one
    assert bool((a.grad.norm(dim=1)[[1, 2, 4, 5]] > 0).all())


# -- debiased and hard ---------------------------------------------------------------------


def ref_debiased(a, p, negs_of, t: float, tau_plus: float, beta: float) -> float:
    """Chuang et al. 2020 / Robinson et al. 2021 with explicit loops."""
    total = 0.0
    for i in range(len(a)):
        pos = math.exp(dot(a[i], p[i]) / t)
        neg = [math.exp(dot(a[i], v) / t) for v in negs_of(i)]
        n = len(neg)
        imp = [x ** beta for x in neg]
        reweight = sum(w * x for w, x in zip(imp, neg, strict=True)) / (sum(imp) / n)
        ng = max((reweight - tau_plus * n * pos) / (1 - tau_plus), n * math.exp(-1 / t))
        total += -math.log(pos / (pos + ng))
    return total / len(a)


@pytest.mark.parametrize("tau_plus", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("beta", [0.0, 0.5, 2.0])
def test_debiased_and_hard_against_loops(tau_plus, beta):
    a, p, n = rand_unit(6, 8, seed=12), rand_unit(6, 8, seed=13), rand_unit(6, 2, 8, seed=14)
    t = 0.5

    def negs_of(i):
        return [p[j] for j in range(6) if j != i] + [n[i, 0], n[i, 1]]

    want = ref_debiased(a, p, negs_of, t, tau_plus, beta)
    if beta == 0:
        got = debiased.compute_loss_from_embeddings(a, p, n, temperature=t, tau_plus=tau_plus)
    else:
        got = hard.compute_loss_from_embeddings(a, p, n, temperature=t, tau_plus=tau_plus,
                                                beta=beta)
    assert float(got) == pytest.approx(want, rel=1e-5)


def test_debiased_clamp_binds_and_reduces_to_infonce_without_debiasing():
    # tau+ = 0, beta = 0: exactly InfoNCE
    a, p, n = rand_unit(5, 4, seed=15), rand_unit(5, 4, seed=16), rand_unit(5, 2, 4, seed=17)
    got = debiased.compute_loss_from_embeddings(a, p, n, temperature=0.2, tau_plus=0.0)
    want = infonce.compute_loss_from_embeddings(a, p, n, temperature=0.2)
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    # t = 1, tau+ = 0.9. Row 0: s_pos = 1, one negative s = -1: (e^-1 - 0.9 e) / 0.1 < 0,
    # so the floor N e^{-1/t} = e^-1 is used. Row 1: s_pos = 0, negative s = 0:
    # Ng = (1 - 0.9) / 0.1 = 1 > e^-1, loss log 2.
    got = debiased.compute_loss_from_embeddings(unit(0, 90), unit(0, 180), temperature=1.0,
                                                tau_plus=0.9)
    want = (-math.log(math.e / (math.e + math.exp(-1))) + math.log(2)) / 2
    assert float(got) == pytest.approx(want, rel=1e-6)


def test_debiased_low_temperature_stays_finite():
    a, p = rand_unit(4, 8, seed=18), rand_unit(4, 8, seed=19)
    got = hard.compute_loss_from_embeddings(a, p, temperature=0.005, tau_plus=0.1, beta=1.0)
    assert math.isfinite(float(got))


# -- supcon ---------------------------------------------------------------------------------


def ref_supcon(z: torch.Tensor, y: list[int], t: float, valid: list[bool] | None = None) -> float:
    m = len(y)
    valid = valid or [True] * m
    losses = []
    for i in range(m):
        if not valid[i]:
            continue
        others = [j for j in range(m) if j != i and valid[j]]
        pos = [j for j in others if y[j] == y[i]]
        if not pos:
            continue
        den = sum(math.exp(dot(z[i], z[j]) / t) for j in others)
        losses.append(-sum(math.log(math.exp(dot(z[i], z[j]) / t) / den) for j in pos) / len(pos))
    return sum(losses) / len(losses)


def test_supcon_against_loops_and_pytorch_metric_learning():
    pml = pytest.importorskip("pytorch_metric_learning.losses")
    z = rand_unit(10, 6, seed=20)
    y = [0, 0, 1, 1, 1, 2, 3, 3, 0, 4]              # label 2 and 4 have no positive
    t = 0.1
    got = supcon.compute_loss_from_embeddings(z, torch.tensor(y), temperature=t)
    assert float(got) == pytest.approx(ref_supcon(z, y, t), rel=1e-5)
    want = pml.SupConLoss(temperature=t)(z, torch.tensor(y))
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    valid = [True] * 10
    valid[1] = valid[4] = False
    got = supcon.compute_loss_from_embeddings(z, torch.tensor(y), torch.tensor(valid),
                                              temperature=t)
    assert float(got) == pytest.approx(ref_supcon(z, y, t, valid), rel=1e-5)


def test_supcon_hand_computed():
    # two features of one class at 0 deg and 90 deg, one of another class at 180 deg, t = 1
    z = unit(0, 90, 180)
    got = supcon.compute_loss_from_embeddings(z, torch.tensor([0, 0, 1]), temperature=1.0)
    row0 = -math.log(math.exp(0) / (math.exp(0) + math.exp(-1)))   # others of 0: 90, 180
    row1 = -math.log(math.exp(0) / (math.exp(0) + math.exp(0)))    # others of 1: 0, 180
    assert float(got) == pytest.approx((row0 + row1) / 2, abs=1e-6)


def test_batch_loss_supcon_uses_negatives_labels_and_flags():
    a, p, n = rand_unit(3, 4, seed=21), rand_unit(3, 4, seed=22), rand_unit(3, 2, 4, seed=23)
    groups = torch.tensor([0, 1, 2])
    neg_groups = torch.tensor([[1, 5], [0, 2], [7, 8]])
    valid = torch.tensor([[True, True], [True, False], [True, True]])
    attract = torch.tensor([[False, True], [False, False], [False, False]])
    got = batch_loss(LossConfig(name="supcon", temperature=0.2), a, p, n, valid, attract,
                     groups, neg_groups)
    z = torch.cat([a, p, n.reshape(6, 4)])
    y = [0, 1, 2, 0, 1, 2, 1, 0, 0, 2, 7, 8]        # attracted negative takes the anchor's label
    v = [True] * 6 + [True, True, True, False, True, True]
    assert float(got) == pytest.approx(ref_supcon(z, y, 0.2, v), rel=1e-5)


def test_supcon_a_row_twice_under_two_labels_is_no_negative_of_itself():
    # views a (row 0, 0 deg) and v (row 1, 90 deg) of one unlabelled source under
    # --relation label: groups of their own, 0 and 1; the pairs (a, v) and (v, a) put each
    # row in the batch twice, once under each group. Before: a's copy under group 1 was a
    # negative of a (its score 1/t in a's denominator). Now one row is one class: all four
    # features are positives of each other. t = 1, L = log(2 + e) (every denominator:
    # two at 90 deg, one copy):
    a, v = unit(0), unit(90)
    groups = torch.tensor([[0, 1], [1, 0]])
    rows = torch.tensor([0, 1, 1, 0])               # anchors a, v; positives v, a
    none = torch.zeros(2, 0, dtype=torch.bool)
    got = batch_loss(LossConfig(name="supcon", temperature=1.0), torch.cat([a, v]),
                     torch.cat([v, a]), torch.zeros(2, 0, 2), none, none, groups,
                     torch.zeros(2, 0, dtype=torch.long), rows=rows)
    log_den = math.log(2 + math.e)
    # each row: -1/3 [(0 - L) + (0 - L) + (1 - L)]
    assert float(got) == pytest.approx(log_den - 1 / 3, abs=1e-6)
    # labels alone (no rows): the defect's value, each row's one positive at 90 deg
    old = batch_loss(LossConfig(name="supcon", temperature=1.0), torch.cat([a, v]),
                     torch.cat([v, a]), torch.zeros(2, 0, 2), none, none, groups,
                     torch.zeros(2, 0, dtype=torch.long))
    assert float(old) == pytest.approx(log_den, abs=1e-6)


def test_supcon_row_classes_join_labels_through_shared_rows():
    labels = torch.tensor([0, 1, 0, 1, 2, 2, 3, 4, 5])
    rows = torch.tensor([0, 2, 2, 3, 4, 5, 7, 8, 0])
    valid = torch.tensor([True] * 8 + [False])      # an invalid copy of row 0 joins nothing
    got = supcon.row_classes(labels, rows, valid)
    # 0 and 1 joined through row 2; 2, 3, 4 and 5 apart (5: only by an invalid feature)
    assert got[:4].unique().numel() == 1
    assert len({int(got[4]), int(got[6]), int(got[7]), int(got[8]), int(got[0])}) == 5
    assert int(got[4]) == int(got[5])


def test_supcon_of_a_batch_with_a_mined_positive_that_is_also_an_anchor():
    # the training forward pass passes each feature's row: pairs (0 -> 2, a mined
    # positive of another group), (2 -> 3, its view), (4 -> 5); row 2 comes twice,
    # under groups 0 and 1, so {0, 2, 3} is one class and {4, 5} another
    from pairkit.train.data import PairArrays
    from pairkit.train.epoch import DeviceData, forward, make_autocast

    vectors = unit(0, 200, 60, 90, 180, 150).numpy()
    groups = np.array([0, 9, 1, 1, 2, 2])
    data = DeviceData(vectors, groups, torch.device("cpu"), streaming=False)
    pairs = PairArrays(np.array([0, 2, 4]), np.array([2, 3, 5]), np.full((3, 0), -1),
                       np.zeros((3, 0), bool))
    out = forward(torch.nn.Identity(), data, pairs, np.arange(3),
                  make_autocast(torch.device("cpu"), None))
    za, zp, zn, valid, attract, g, ng, xa, rows = out
    assert rows.tolist() == [0, 2, 4, 2, 3, 5]
    got = batch_loss(LossConfig(name="supcon", temperature=0.5, keep_input=0.0), za, zp, zn,
                     valid, attract, g, ng, xa, rows=rows)
    z = torch.cat([za, zp])
    assert float(got) == pytest.approx(ref_supcon(z, [0, 0, 2, 0, 0, 2], 0.5), rel=1e-5)
    # before: labels by the pairs' anchors, [0, 1, 2, 0, 1, 2]: row 2's copy a negative
    assert float(got) != pytest.approx(ref_supcon(z, [0, 1, 2, 0, 1, 2], 0.5), rel=1e-3)


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "nope"}, "--loss must be one of"),
    ({"temperature": 0.0}, "--temperature must be > 0, got 0.0"),
    ({"margin": -1.0}, "--margin must be >= 0"),
    ({"tau_plus": 1.0}, "--tau-plus must be in [0, 1)"),
    ({"beta": -0.5}, "--beta must be >= 0"),
    ({"keep_input": -1.0}, "--keep-input must be >= 0"),
    ({"keep_input_temperature": 0.0}, "--keep-input-temperature must be > 0"),
])
def test_loss_config_checks(kwargs, message):
    with pytest.raises(PairkitError, match=message.replace("[", r"\[").replace(")", r"\)")):
        LossConfig(**kwargs).check()


def ref_keep_input(x: torch.Tensor, z: torch.Tensor, t_in: float, t: float) -> float:
    """Mean over anchors i of -sum_{j != i} p_ij log q_ij, p and q softmaxes over the
    other anchors of the input's and the outputs' cosines; loops only."""
    rows = x.shape[0]
    total = 0.0
    for i in range(rows):
        others = [j for j in range(rows) if j != i]
        ex = [math.exp(dot(x[i], x[j]) / t_in) for j in others]
        ez = [math.exp(dot(z[i], z[j]) / t) for j in others]
        total += -sum(e / sum(ex) * math.log(f / sum(ez)) for e, f in zip(ex, ez, strict=True))
    return total / rows


def test_keep_input_hand_computed():
    # inputs at 0, 90 and 180 deg, outputs at 0, 60, 180 deg, both temperatures 1:
    # p_0 = softmax(cos 90, cos 180) = softmax(0, -1); q_0 = softmax(cos 60, cos 180)
    x, z = unit(0, 90, 180), unit(0, 60, 180)
    got = keep_input.compute_loss_from_embeddings(x, z, input_temperature=1.0, temperature=1.0)

    def soft(a: float, b: float) -> tuple[float, float]:
        return math.exp(a) / (math.exp(a) + math.exp(b)), math.exp(b) / (math.exp(a) + math.exp(b))

    c = math.cos(math.radians(120))
    rows = [(soft(0, -1), soft(0.5, -1)),   # anchor 0: others 1, 2
            (soft(0, 0), soft(0.5, c)),     # anchor 1: others 0, 2
            (soft(-1, 0), soft(-1, c))]     # anchor 2: others 0, 1
    want = sum(-(p[0] * math.log(q[0]) + p[1] * math.log(q[1])) for p, q in rows) / 3
    assert float(got) == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_keep_input_against_loops_and_its_minimum(seed):
    x, z = rand_unit(7, 5, seed=seed), rand_unit(7, 3, seed=seed + 10)
    got = keep_input.compute_loss_from_embeddings(x, z, input_temperature=0.05, temperature=0.1)
    assert float(got) == pytest.approx(ref_keep_input(x, z, 0.05, 0.1), rel=1e-5)
    # at equal temperatures the outputs equal to the inputs are the minimum: the
    # cross-entropy is then the teacher's own entropy, below any other outputs'
    same = keep_input.compute_loss_from_embeddings(x, x, input_temperature=0.1, temperature=0.1)
    other = keep_input.compute_loss_from_embeddings(x, z[:, :3] @ torch.eye(3, 5),
                                                    input_temperature=0.1, temperature=0.1)
    assert float(same) < float(other)
    assert float(keep_input.compute_loss_from_embeddings(x[:1], z[:1])) == 0.0


def test_batch_loss_adds_the_weighted_keep_input_term():
    a, p, n = rand_unit(4, 4, seed=31), rand_unit(4, 4, seed=32), rand_unit(4, 2, 4, seed=33)
    x = rand_unit(4, 6, seed=34)
    valid = torch.ones(4, 2, dtype=torch.bool)
    attract = torch.zeros(4, 2, dtype=torch.bool)
    groups, neg_groups = torch.arange(4), torch.full((4, 2), 9)
    off = batch_loss(LossConfig(keep_input=0.0), a, p, n, valid, attract, groups, neg_groups, x)
    plain = infonce.compute_loss_from_embeddings(a, p, n, valid, attract, groups,
                                                 temperature=0.1)
    assert float(off) == pytest.approx(float(plain), rel=1e-6)
    default = batch_loss(LossConfig(), a, p, n, valid, attract, groups, neg_groups, x)
    assert float(default) == pytest.approx(float(plain) + 0.5 * ref_keep_input(x, a, 0.05, 0.1),
                                           rel=1e-5)  # on by default, weight 0.5
    cfg = LossConfig(keep_input=2.0, keep_input_temperature=0.05)
    got = batch_loss(cfg, a, p, n, valid, attract, groups, neg_groups, x)
    assert float(got) == pytest.approx(float(plain) + 2.0 * ref_keep_input(x, a, 0.05, 0.1),
                                       rel=1e-5)
