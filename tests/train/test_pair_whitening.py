"""The head's pair whitening (learned whitening from the table's pairs): the fit against
scipy's generalised symmetric eigen solver and a hand-computed case, the pairs a run's
table gives, and a trained head whose ``apply`` is the reference map of its outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.linalg
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.train.command import train_to_files
from pairkit.train.config import TrainConfig
from pairkit.train.head import load_head
from pairkit.train.pair_whitening import fit_pair_whitening, relation_pairs, training_pairs
from tests.conftest import random_store
from tests.train.test_output_whitening import FAST, module_outputs

runner = CliRunner()


def reference(z, pos, neg, mean, dims, shrink):
    """Independent: the covariances by explicit loops over the pairs, the projection as
    scipy's generalised eigenvectors of (C_D, shrunk C_S), normalised v' C_S v = 1."""
    d = z.shape[1]
    cs = sum(np.outer(z[i] - z[j], z[i] - z[j]) for i, j in pos) / len(pos)
    cs = (1 - shrink) * cs + shrink * np.trace(cs) / d * np.eye(d)
    cd = sum(np.outer(z[i] - z[j], z[i] - z[j]) for i, j in neg) / len(neg)
    values, vectors = scipy.linalg.eigh(cd, cs)
    return mean, vectors[:, np.argsort(values)[::-1][:dims]]


def mapped(x, mean, proj):
    w = (x - mean) @ proj
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def test_hand_computed_two_dims():
    # positives differ along x only (C_S = [[1, 0], [0, 0]]), shrunk by 1/2 to
    # [[3/4, 0], [0, 1/4]]: C_S^(-1/2) = diag(2 / sqrt(3), 2); kept without rotation
    z = np.array([[0.5, 0.0], [-0.5, 0.0], [0.0, 1.0], [0.0, -1.0]])
    pos, neg = np.array([[0, 1]]), np.array([[2, 3]])
    mean, proj = fit_pair_whitening(z, pos, neg, np.zeros(2), dims=2, shrink=0.5)
    np.testing.assert_allclose(proj, np.diag([2 / np.sqrt(3), 2.0]), rtol=1e-6)
    # one dim kept: negatives differ along y (C_D = [[0, 0], [0, 4]]): the y axis, scaled 2
    _, proj = fit_pair_whitening(z, pos, neg, np.zeros(2), dims=1, shrink=0.5)
    np.testing.assert_allclose(np.abs(proj[:, 0]), [0.0, 2.0], atol=1e-6)


@pytest.mark.parametrize("dims", [3, 8])
def test_fit_equals_the_generalised_eigenvectors(dims):
    rng = np.random.default_rng(0)
    z = rng.normal(size=(60, 8)) * np.linspace(0.2, 2.0, 8)
    pos = rng.integers(0, 60, size=(40, 2))
    neg = rng.integers(0, 60, size=(90, 2))
    mean = z.mean(axis=0)
    got_mean, got = fit_pair_whitening(z, pos, neg, mean, dims=dims, shrink=0.3)
    _, want = reference(z, pos, neg, mean, dims, 0.3)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-6)
    if dims == 8:  # all kept, unrotated: the same map up to a rotation (cosines equal)
        a, b = mapped(z, mean, got), mapped(z, mean, want)
        np.testing.assert_allclose(a @ a.T, b @ b.T, atol=1e-5)
    else:  # eigenvectors up to sign
        np.testing.assert_allclose(np.abs(got), np.abs(want), rtol=1e-4, atol=1e-6)


def test_training_pairs_of_a_table():
    # examples (anchor, positive, negatives); anchor 4 is a validation row; 7's negative
    # 2 is attracted; -1 is none; anchor 0 has mined positives 5 and 6, anchor 7 has 3
    anchor, positive = np.array([0, 0, 4, 7]), np.array([1, 1, 5, 8])
    negatives = np.array([[2, 3], [2, -1], [9, 9], [2, 6]])
    attract = np.array([[False, False], [False, False], [False, False], [True, False]])
    offsets = np.array([0, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3])
    ids = np.array([5, 6, 3])
    train_rows = np.ones(10, bool)
    train_rows[4] = False
    pos, neg = training_pairs(anchor, positive, negatives, attract, offsets, ids, train_rows, 0)
    assert pos.tolist() == [[0, 1], [0, 5], [0, 6], [7, 3], [7, 8]]
    assert neg.tolist() == [[0, 2], [0, 3], [7, 6]]
    pos, _ = training_pairs(anchor, positive, negatives, attract, None, None, train_rows, 0)
    assert pos.tolist() == [[0, 1], [7, 8]]


def test_trained_head_applies_the_pair_whitening_of_its_table(tmp_path):
    import pandas as pd

    store = random_store(tmp_path / "store", n_sources=60, views=2, dim=12, classes=4)
    table = tmp_path / "pairs.parquet"
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-k", "3",
                            "--filter-false-negatives", "-o", str(table), "-q"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(table)
    assert (df["positive_kind"] == "mined").any()
    cfg = TrainConfig(pair_whitening=4, **FAST)
    result = train_to_files(store.root, tmp_path / "h", cfg, pairs=str(table))
    head = load_head(tmp_path / "h")
    assert head.out_dim == result.out_dim == 4 and result.whitened
    x = store.vectors()
    z = module_outputs(head, x)
    pos = df[["anchor_id", "positive_id"]].drop_duplicates().to_numpy()
    neg = df.loc[df["negative_id"] >= 0, ["anchor_id", "negative_id"]].drop_duplicates()
    mean, proj = reference(z, pos, neg.to_numpy(), z.mean(axis=0), 4, 0.3)
    got, want = head.apply(x), mapped(z, mean, proj)
    np.testing.assert_allclose(got @ got.T, want @ want.T, atol=2e-3)
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["whitening"] == {"kind": "pairs", "shrink": 0.3, "dims": 4,
                                   "rows": store.count}


def test_relation_pairs_hand_computed():
    groups = np.array([0, 1, 0, 2, 2, 2, 3, 1])
    train = np.ones(8, bool)
    train[7] = False  # group 1 keeps one training row: no pair
    pos, neg = relation_pairs(groups, train, 0)
    # group 0: one pair; group 2 (three rows): a cycle; groups 1 and 3: none
    assert pos.tolist() == [[0, 2], [3, 4], [4, 5], [5, 3]]
    assert len(neg) <= len(pos)
    assert all(groups[a] != groups[b] and train[a] and train[b] for a, b in neg)
    assert set(neg[:, 0].tolist()) <= set(pos[:, 0].tolist())


def test_default_head_is_whitened_by_its_positive_pairs(tmp_path):
    """The default (``--pair-whitening all``): ``apply`` is the module's outputs, centred,
    through C_S^(-1/2) of the run's positive pairs (shrunk), every direction kept: here a
    run without a table, whose pairs are the two views of each source."""
    store = random_store(tmp_path / "store", n_sources=40, views=2, dim=12, classes=4)
    result = train_to_files(store.root, tmp_path / "h", TrainConfig(relation="instance",
                                                                    **FAST))
    head = load_head(tmp_path / "h")
    assert result.whitened and head.out_dim == result.out_dim == 10
    x = store.vectors()
    z = module_outputs(head, x)
    pos = np.array([[2 * s, 2 * s + 1] for s in range(40)])  # view 0 and 1 of each source
    d = z.shape[1]
    cs = sum(np.outer(z[i] - z[j], z[i] - z[j]) for i, j in pos) / len(pos)
    cs = 0.7 * cs + 0.3 * np.trace(cs) / d * np.eye(d)
    inv_sqrt = np.real(scipy.linalg.inv(scipy.linalg.sqrtm(cs)))
    got, want = head.apply(x), mapped(z, z.mean(axis=0), inv_sqrt)
    np.testing.assert_allclose(got, want, atol=2e-4)
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["whitening"] == {"kind": "pairs", "shrink": 0.3, "dims": 10,
                                   "rows": store.count}
    assert config["training"]["pair_whitening"] is None  # all
    # with --whiten the PCA whitening instead; 0 none
    r = runner.invoke(app, ["train", str(store.root), "--relation", "instance", "-o",
                            str(tmp_path / "w"), "--whiten", "0.25", "--epochs", "1"])
    assert r.exit_code == 0, r.output
    config = json.loads((tmp_path / "w" / "config.json").read_text())
    assert config["whitening"]["kind"] == "pca"
    r = runner.invoke(app, ["train", str(store.root), "--relation", "instance", "-o",
                            str(tmp_path / "n"), "--pair-whitening", "0", "--epochs", "1"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "n" / "config.json").read_text())["whitening"] is None


@pytest.mark.parametrize("value, message", [
    ("-1", "--pair-whitening must be all or >= 0 (0: none), got -1"),
    ("some", "--pair-whitening must be all or a whole number, got 'some'"),
])
def test_bad_values(tmp_path, value, message):
    store = random_store(tmp_path / "store", n_sources=10, views=2, dim=8, classes=2)
    r = runner.invoke(app, ["train", str(store.root), "--relation", "instance", "-o",
                            str(tmp_path / "h"), "--pair-whitening", value])
    assert r.exit_code == 2 and message in r.output
    assert not (tmp_path / "h").exists()


def test_refused_beside_whiten(tmp_path):
    store = random_store(tmp_path / "store", n_sources=10, views=2, dim=8, classes=2)
    r = runner.invoke(app, ["train", str(store.root), "--pairs", str(tmp_path / "p.parquet"),
                            "-o", str(tmp_path / "h"), "--pair-whitening", "4", "--whiten",
                            "0.25"])
    assert r.exit_code == 2 and "give one" in r.output
    assert not (tmp_path / "h").exists()


def _store_of(tmp_path, name, x, sources):
    import pandas as pd

    from pairkit.core.store_writer import write_store

    items = pd.DataFrame({"path": [f"{s}_{i}.jpg" for i, s in enumerate(sources)],
                          "source": sources,
                          "view": [sources[:i].count(s) for i, s in enumerate(sources)]})
    return write_store(tmp_path / name, np.asarray(x, np.float32), items,
                       encoder={"name": "random"}, dtype="float32")


def test_degenerate_pairs_skip_the_whitening_and_say_why(tmp_path):
    """Found by a bug hunt (2026-12-06), the default's first day: views that are the same
    vector (C_S = 0) saved a NaN whitening (exit 0, then no command could load the head);
    a store of fewer training rows than 2 per output dim was whitened anyway, and centring
    two rows made a source's two views opposite (cosine -1). Both are skipped now (under 32
    training rows to centre on), and the summary says why."""
    base = np.random.default_rng(0).normal(size=(30, 8))
    same = _store_of(tmp_path, "same", np.repeat(base, 2, axis=0),
                     [f"s{i // 2}" for i in range(60)])
    r = runner.invoke(app, ["train", str(same.root), "--relation", "instance", "-o",
                            str(tmp_path / "h"), "--epochs", "1"])
    assert r.exit_code == 0, r.output
    assert "outputs not whitened: the positive pairs do not differ" in r.output
    assert "Warning" not in r.output and "RuntimeWarning" not in r.output
    head = load_head(tmp_path / "h")
    assert head.whitening is None and np.isfinite(head.apply(same.vectors())).all()
    rng = np.random.default_rng(1)
    b, c = rng.normal(size=16), rng.normal(size=16)
    # two sources (one would be refused since hunt-q 1: its pairs have no negative)
    two = _store_of(tmp_path, "two", [b, b + 0.05 * rng.normal(size=16), c,
                                      c + 0.05 * rng.normal(size=16)], ["x", "x", "y", "y"])
    r = runner.invoke(app, ["train", str(two.root), "--relation", "instance", "-o",
                            str(tmp_path / "t"), "--epochs", "2"])
    assert r.exit_code == 0, r.output
    assert "outputs not whitened: 4 training rows, under the 32 it centres on" in r.output
    z = load_head(tmp_path / "t").apply(two.vectors())
    assert float(z[0] @ z[1]) > 0.9
