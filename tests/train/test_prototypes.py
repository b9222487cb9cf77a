"""ProtoNCE (``train --prototypes``): the concentration and the loss against hand-computed
values and an explicit loop, the cluster counts, and the term inside training (it moves
the weights, is reproducible and resumes to the same weights)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pairkit.errors import UsageError
from pairkit.train.config import TrainConfig
from pairkit.train.loop import train_head
from pairkit.train.prototypes import (
    ALPHA,
    cluster_counts,
    concentration,
    fit_prototypes,
    proto_loss,
)
from tests.conftest import random_store
from tests.train.test_loop import FAST, StopAfter, same_weights


@pytest.fixture
def store(tmp_path):
    return random_store(tmp_path / "store", n_sources=40, views=2, dim=12, classes=4)


def test_cluster_counts_follow_rows_per_cluster():
    assert cluster_counts((50, 25, 12), 1000) == (20, 40, 83)
    assert cluster_counts((50,), 30) == (2,)  # at least 2
    assert cluster_counts((2, 3), 10) == (5, 3)  # at most n // 2
    assert cluster_counts((500, 600), 1000) == (2,)  # duplicates dropped


def test_concentration_by_hand():
    # cluster 0: two rows at distances 0.1 and 0.3 from its centroid; cluster 1: three
    # rows at 0.2 each; cluster 2: one row (gets the largest phi of the others)
    c = np.eye(3, dtype=np.float64)
    z = np.array([c[0] + [0, 0.1, 0], c[0] + [0, 0.3, 0],
                  c[1] + [0.2, 0, 0], c[1] + [0, 0, 0.2], c[1] + [-0.2, 0, 0], c[2]])
    assign = np.array([0, 0, 1, 1, 1, 2])
    phi0 = 0.4 / (2 * math.log(2 + ALPHA))
    phi1 = 0.6 / (3 * math.log(3 + ALPHA))
    raw = np.array([phi0, phi1, max(phi0, phi1)])
    raw = np.clip(raw, np.percentile(raw, 10), np.percentile(raw, 90))
    want = 0.1 * raw / raw.mean()
    got = concentration(z, assign, c, temperature=0.1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.mean() == pytest.approx(0.1, rel=1e-6)


def test_proto_loss_against_an_explicit_loop():
    import torch

    rng = np.random.default_rng(3)
    z = rng.normal(size=(5, 4))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    cents = [rng.normal(size=(3, 4)), rng.normal(size=(2, 4))]
    cents = [c / np.linalg.norm(c, axis=1, keepdims=True) for c in cents]
    phis = [np.array([0.1, 0.2, 0.05]), np.array([0.3, 0.1])]
    targets = [np.array([0, 2, 1, -1, 0]), np.array([1, 1, 0, 0, -1])]
    want = []
    for cent, phi, target in zip(cents, phis, targets, strict=True):
        terms = []
        for i in range(len(z)):
            if target[i] < 0:
                continue
            logits = [float(z[i] @ cent[j]) / phi[j] for j in range(len(cent))]
            norm = math.log(sum(math.exp(v) for v in logits))
            terms.append(norm - logits[target[i]])
        want.append(sum(terms) / len(terms))
    t = torch.tensor
    got = proto_loss(t(z, dtype=torch.float32),
                     [t(x) for x in targets],
                     [t(c, dtype=torch.float32) for c in cents],
                     [t(p, dtype=torch.float32) for p in phis])
    assert float(got) == pytest.approx(sum(want) / 2, rel=1e-5)


def test_fit_prototypes_leaves_other_rows_out():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(60, 5)).astype(np.float32)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    rows = np.arange(0, 60, 2)
    got = fit_prototypes(z, rows, (3, 6), 0.1, seed=0)
    for a, c, p in zip(got.assign, got.centroids, got.phi, strict=True):
        assert (a[1::2] == -1).all() and (a[rows] >= 0).all()
        assert a.max() < len(c) == len(p)
        np.testing.assert_allclose(np.linalg.norm(c, axis=1), 1, rtol=1e-5)
        # every training row is in its nearest centroid's cluster (a k-means fixed point)
        np.testing.assert_array_equal(a[rows], np.argmax(z[rows] @ c.T, axis=1))


def test_prototypes_change_training_and_are_reproducible(store, tmp_path):
    base = {**FAST, "relation": "instance"}
    train_head(store, tmp_path / "plain", TrainConfig(**base))
    cfg = TrainConfig(**base, prototypes=(10, 5))
    train_head(store, tmp_path / "p1", cfg)
    train_head(store, tmp_path / "p2", cfg)
    assert same_weights(tmp_path / "p1", tmp_path / "p2")
    assert not same_weights(tmp_path / "plain", tmp_path / "p1")
    # weight 0 is the plain run
    train_head(store, tmp_path / "w0", TrainConfig(**base, prototypes=(10,), proto_weight=0))
    assert same_weights(tmp_path / "plain", tmp_path / "w0")


def test_prototypes_resume_to_the_same_weights(store, tmp_path):
    cfg = TrainConfig(**{**FAST, "epochs": 4}, relation="instance", prototypes=(8,))
    train_head(store, tmp_path / "straight", cfg)
    with pytest.raises(KeyboardInterrupt):
        train_head(store, tmp_path / "cut", cfg, hook=StopAfter(2))
    train_head(store, tmp_path / "cut", cfg, resume=True)
    assert same_weights(tmp_path / "straight", tmp_path / "cut")


@pytest.mark.parametrize("bad, match", [({"prototypes": (1,)}, "rows per cluster"),
                                        ({"proto_weight": -1.0}, "--proto-weight")])
def test_bad_options_are_refused(bad, match):
    with pytest.raises(UsageError, match=match):
        TrainConfig(relation="instance", **bad).check()
