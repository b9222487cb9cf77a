"""Outliers and label errors on the kNN graph: hand-computed votes and scores, the CSR
graph against scikit-learn's kneighbors_graph, and the ``pairkit issues`` command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import load_npz
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import l2_normalize
from pairkit.core.store_writer import write_store
from pairkit.errors import PairkitError, UsageError
from pairkit.eval.data_issues import IssuesConfig, KnnGraph, find_issues, knn_graph, to_csr
from pairkit.eval.issues import label_error, outlier
from pairkit.eval.issues.outlier import robust_z

runner = CliRunner()


def test_vote_and_label_error_by_hand() -> None:
    # 4 rows, k = 2; row 0's neighbours 1 (s=0.9) and 2 (s=0.5)
    g = KnnGraph(np.array([[1, 2], [0, 2], [3, 0], [2, 1]]),
                 np.array([[0.9, 0.5], [0.9, 0.2], [0.8, 0.5], [0.8, -0.3]], np.float32))
    labels = np.array([0, 1, 1, 1])
    probs = label_error.vote(g, labels, 2)
    # row 0: votes 0.9 (label 1) + 0.5 (label 1) -> p(1) = 1
    assert probs[0] == pytest.approx([0.0, 1.0])
    # row 1: 0.9 for label 0, 0.2 for label 1
    assert probs[1] == pytest.approx([0.9 / 1.1, 0.2 / 1.1])
    # row 3: the negative similarity does not vote
    assert probs[3] == pytest.approx([0.0, 1.0])

    class Cfg:
        outlier_z = 3.5

    det = label_error.detect(g, labels, Cfg)
    assert det.score[0] == pytest.approx(1.0)  # 1 - p(0 | row 0)
    # thresholds: t_0 = p(0|0) = 0; t_1 = mean p(1|i) over rows 1-3
    t1 = np.mean([0.2 / 1.1, 0.5 / 1.3, 1.0])
    assert probs[1, 1] < t1
    # row 0: class 1 reaches t_1 (1.0 >= t1) and beats label 0 (0 >= t_0 = 0, p=0): flagged
    # row 1: p(0 | 1) = 0.82, but t_0 = 0 (class 0's one source has no neighbour of its
    # class): no evidence, class 0 is never suggested; p(1 | 1) = 0.18 < t_1: not flagged
    assert det.flag.tolist() == [True, False, False, False]
    assert det.suggested.tolist() == [1, -1, -1, -1]
    assert "another label" in det.reason[0]


def rare_class_store() -> tuple[np.ndarray, np.ndarray]:
    """hunt-q item 3: three classes of 20 around e0, e1, e2 (x3) and one source "d"
    between a and b, the only one of its class."""
    rng = np.random.default_rng(6)
    c = np.eye(16)[:3] * 3
    x = np.concatenate([c[i] + 0.5 * rng.normal(size=(20, 16)) for i in range(3)]
                       + [(c[0] + c[1]) / 2 + 0.5 * rng.normal(size=(1, 16))])
    labels = np.array(["a"] * 20 + ["b"] * 20 + ["c"] * 20 + ["d"], dtype=object)
    return l2_normalize(x.astype(np.float32)), labels


def test_a_class_of_one_is_no_suggested_label() -> None:
    """Found by a bug hunt (hunt-q 3): the lone "d" can never vote for itself, so t_d = 0
    and any vote for d "reached" it: sources voted 0.90 for their own label and 0.10 for
    d were flagged with d suggested. A class at t_c = 0 is no evidence."""
    x, labels = rare_class_store()
    found, graph, names = find_issues(x, labels, checks=("label-error",), k=10)
    det = found["label-error"]
    codes = {name: i for i, name in enumerate(names)}
    y = np.array([codes[v] for v in labels])
    probs = label_error.vote(graph, y, 4)
    # by hand: no neighbour of "d" (row 60) is a "d" -> t_d = p(d | 60) = 0
    assert (labels[graph.ids[60]] != "d").all() and probs[60, codes["d"]] == 0
    # the sources the old rule flagged: a for 0.90-0.91, "d" for 0.09-0.10, both under
    # t_a and above t_d = 0
    t_a = probs[y == codes["a"], codes["a"]].mean()
    for i in (1, 5, 6):
        assert labels[i] == "a" and 0.89 < probs[i, codes["a"]] < t_a
        assert 0.08 < probs[i, codes["d"]] < 0.11
        assert probs[i, codes["b"]] == probs[i, codes["c"]] == 0
    # now: no class other than the given one has evidence for them, nobody is flagged and
    # d is never suggested
    assert not det.flag.any()
    assert codes["d"] not in det.suggested.tolist()


def test_a_row_without_votes_is_not_a_label_error() -> None:
    """Found by a bug hunt (2026-12-06): two sources at opposite ends (similarity -1, so
    no vote) were flagged for whichever label had code 0: a zero vote met a zero class
    threshold."""
    g = KnnGraph(np.array([[1], [0]]), np.array([[-1.0], [-1.0]], np.float32))

    class Cfg:
        outlier_z = 3.5

    det = label_error.detect(g, np.array([0, 1]), Cfg)
    assert det.flag.tolist() == [False, False]


def test_outlier_scores_by_hand() -> None:
    sims = np.array([[0.9, 0.8]] * 9 + [[0.1, 0.0]], np.float32)
    ids = np.array([[(i + 1) % 10, (i + 2) % 10] for i in range(10)])

    det = outlier.detect(KnnGraph(ids, sims), None, IssuesConfig(outlier_z=3.5))
    assert det.score[:9] == pytest.approx([0.15] * 9)
    assert det.score[9] == pytest.approx(0.95)
    assert det.flag.tolist() == [False] * 9 + [True]
    x = np.array([1.0, 2.0, 3.0, 4.0, 100.0])
    assert robust_z(x)[2] == 0.0
    assert robust_z(x)[4] == pytest.approx((100 - 3) / (1.4826 * 1.0))
    # a floor under the scale's 1.4826 (a store's rounding) changes nothing above it
    np.testing.assert_array_equal(robust_z(x, floor=0.002), robust_z(x))


def test_outlier_flag_is_one_sided_and_means_over_present_neighbours() -> None:
    """Mean distances 0.25, 0.26, ..., 0.34 (ten rows), 0.0 (a tight pair) and 0.95:
    median 0.295, MAD 0.03, scale 1.4826 * 0.03; z(0.95) = +14.7 is flagged, z(0.0) =
    -6.6 (unusually close) is not. A row with two of three neighbours (distances 0.2,
    0.4, padding) scores their mean 0.3, not 0.6 / 3."""
    spread = 0.25 + 0.01 * np.arange(10)
    dist = np.concatenate([spread, [0.0, 0.95]])
    sims = np.repeat(1.0 - dist[:, None], 2, axis=1).astype(np.float32)
    n = len(dist)
    ids = np.array([[(i + 1) % n, (i + 2) % n] for i in range(n)])
    det = outlier.detect(KnnGraph(ids, sims), None, IssuesConfig(outlier_z=3.5))
    np.testing.assert_allclose(det.score, dist, atol=1e-6)
    z = robust_z(det.score)
    assert z[10] == pytest.approx(-0.295 / (1.4826 * 0.03), rel=1e-3)
    assert z[11] == pytest.approx(0.655 / (1.4826 * 0.03), rel=1e-3)
    assert det.flag.tolist() == [False] * 11 + [True]
    # padding: -1 ids, -inf similarities
    ids3 = np.concatenate([ids, ids[:, :1]], axis=1)
    sims3 = np.concatenate([sims, sims[:, :1]], axis=1)
    ids3[0, 2], sims3[0] = -1, [0.8, 0.6, -np.inf]
    det3 = outlier.detect(KnnGraph(ids3, sims3), None, IssuesConfig(outlier_z=3.5))
    assert det3.score[0] == pytest.approx(0.3, abs=1e-6)
    np.testing.assert_allclose(det3.score[1:], dist[1:], atol=1e-6)


def test_outlier_scale_has_the_store_dtypes_floor() -> None:
    """Found by a bug hunt (hunt-q 5): 29 of 40 scores 0 and 11 at 5.5e-5 (float16
    rounding): MAD 0, mean absolute deviation 11 * 5.5e-5 / 40 = 1.5125e-5, scale
    1.2533 * 1.5125e-5 = 1.896e-5, z = 5.5e-5 / 1.896e-5 = 2.90; with the float16 floor
    0.002 on the scale, z = 5.5e-5 / 0.002 = 0.0275."""
    score = np.array([0.0] * 29 + [5.5e-5] * 11)
    assert robust_z(score)[-1] == pytest.approx(5.5e-5 / (1.253314 * 11 * 5.5e-5 / 40))
    assert robust_z(score, floor=0.002)[-1] == pytest.approx(0.0275)
    assert robust_z(score, floor=0.002)[0] == 0.0


def same_rows(n: int = 40) -> np.ndarray:
    """hunt-q item 5: 40 rows within 1e-3 of (1, ..., 1): float16 rounds 29 of them to one
    vector, the rest differ from it by rounding only."""
    rng = np.random.default_rng(16)
    return (np.ones((n, 16)) + 1e-3 * rng.normal(size=(n, 16))).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_rounding_noise_is_no_outlier(tmp_path: Path, dtype: str) -> None:
    """The float16 store flagged 3 sources at "mean distance 0.000 ... robust z 6.8"; the
    same rows stored as float32 flagged none. Now neither does."""
    import pandas as pd

    from pairkit.eval.issues_command import issues_table

    items = pd.DataFrame({"path": [f"i{i}.png" for i in range(40)]})
    write_store(tmp_path / "s", l2_normalize(same_rows()), items, dtype=dtype)
    table, summary, _, _ = issues_table(tmp_path / "s", IssuesConfig())
    assert summary["outlier"] == 0 and table.empty
    # an outlier among them is still one
    x = same_rows(41)
    x[40] = -x[40]
    write_store(tmp_path / "t", l2_normalize(x), pd.DataFrame(
        {"path": [f"i{i}.png" for i in range(41)]}), dtype=dtype)
    table, summary, _, _ = issues_table(tmp_path / "t", IssuesConfig())
    assert summary["outlier"] == 1 and table["id"].tolist() == [40]


def test_csr_graph_equals_sklearn() -> None:
    from sklearn.neighbors import NearestNeighbors

    x = l2_normalize(np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32))
    g = knn_graph(x, 5)
    ours = to_csr(g)
    ref = NearestNeighbors(n_neighbors=5, metric="cosine").fit(x).kneighbors_graph(
        mode="distance")
    assert ours.shape == (40, 40) and ours.nnz == 40 * 5
    assert np.allclose(ours.toarray(), ref.toarray(), atol=1e-5)
    for i in range(40):  # each row ascending, as cleanlab expects
        row = ours.data[ours.indptr[i]: ours.indptr[i + 1]]
        assert np.all(np.diff(row) >= 0)


def test_planted_label_errors_are_found() -> None:
    rng = np.random.default_rng(1)
    centres = l2_normalize(rng.normal(size=(4, 16)).astype(np.float32)) * 3
    x = l2_normalize(np.concatenate([c + 0.5 * rng.normal(size=(50, 16)) for c in centres]))
    labels = np.repeat(np.array(["a", "b", "c", "d"], dtype=object), 50)
    wrong = rng.choice(200, 10, replace=False)
    noisy = labels.copy()
    noisy[wrong] = np.where(labels[wrong] == "a", "b", "a")
    found, _, names = find_issues(x, noisy, k=10)
    flag = found["label-error"].flag
    hit = flag[wrong]
    # confident learning is conservative (a wrong label beside another wrong one may stay)
    # but precise here
    assert hit.sum() >= 5 and flag.sum() == hit.sum()
    sugg = names[found["label-error"].suggested[wrong[hit]]]
    assert (sugg == labels[wrong[hit]]).all()
    # the same flags from a plain-Python reading of the rule
    g = knn_graph(x, 10)
    codes = {"a": 0, "b": 1, "c": 2, "d": 3}
    y = [codes[v] for v in noisy]
    probs = []
    for i in range(200):
        votes = [0.0] * 4
        for j, s in zip(g.ids[i], g.similarities[i], strict=True):
            votes[y[j]] += max(float(s), 0.0)
        probs.append([v / sum(votes) for v in votes])
    t = [np.mean([probs[i][c] for i in range(200) if y[i] == c]) for c in range(4)]
    ref = []
    for i in range(200):
        above = [c for c in range(4) if probs[i][c] >= t[c] and t[c] > 0]
        ref.append(bool(above) and max(above, key=lambda c: probs[i][c]) != y[i])
    assert flag.tolist() == ref


def test_find_issues_refuses_bad_options() -> None:
    x = l2_normalize(np.eye(5, dtype=np.float32))
    with pytest.raises(UsageError, match="unknown check 'typo'"):
        find_issues(x, None, checks=("typo",))
    with pytest.raises(UsageError, match="label-error needs labels"):
        find_issues(x, None)
    with pytest.raises(UsageError, match="--k must be >= 1"):
        find_issues(x, None, checks=("outlier",), k=0)


def test_cli_issues(tmp_path: Path) -> None:
    import pandas as pd

    rng = np.random.default_rng(2)
    x = l2_normalize(np.concatenate([rng.normal(size=(30, 8)) + 4, rng.normal(size=(1, 8)) - 4
                                     ]).astype(np.float32))
    items = pd.DataFrame({"path": [f"p{i}.png" for i in range(31)],
                          "label": ["x"] * 30 + ["y"]})
    write_store(tmp_path / "s", x, items)
    graph = tmp_path / "g.npz"
    r = runner.invoke(app, ["issues", str(tmp_path / "s"), "--k", "5", "--knn-graph",
                            str(graph)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert {"id": 30, "issue": "outlier"}.items() <= rows[0].items() or any(
        row["id"] == 30 and row["issue"] == "outlier" for row in rows)
    assert load_npz(graph).shape == (31, 31)
    assert np.load(tmp_path / "g.ids.npy").tolist() == list(range(31))
    r = runner.invoke(app, ["issues", str(tmp_path / "s"), "--knn-graph", str(graph)])
    assert r.exit_code == 1 and "exists; pass --force" in r.output
    r = runner.invoke(app, ["issues", str(tmp_path / "s"), "--checks", "nope"])
    assert r.exit_code == 2 and "unknown check 'nope'" in r.output


def test_outlier_reason_reads_above_its_threshold() -> None:
    """Found by a bug hunt (2026-12-06): z was printed to one decimal, so a flag at
    z = 3.52 read "robust z 3.5 > 3.5". Scores 0.1 ... 0.8 and x: median 0.5, MAD 0.2,
    z(x) = (x - 0.5) / (1.4826 * 0.2), here 3.52."""
    from pairkit.core.shown import shown, shown_above

    x = 0.5 + 3.52 * 1.4826 * 0.2
    dist = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, x])
    graph = KnnGraph(np.roll(np.arange(9), -1)[:, None], (1.0 - dist)[:, None])

    det = outlier.detect(graph, None, IssuesConfig(outlier_z=3.5))
    assert det.flag.tolist() == [False] * 8 + [True]
    assert det.reason[8] == f"mean distance {x:.3f} to its 1 nearest sources, robust z 3.52 > 3.5"
    reason = outlier.detect(graph, None, IssuesConfig(outlier_z=1.0)).reason[8]
    assert reason.endswith("robust z 3.5 > 1")
    assert shown_above(3.5000001, 3.5) == "3.5000001"
    assert shown_above(4.04, 3.5) == "4.0"
    assert shown(3.5) == "3.5" and shown(1 / 3) == repr(1 / 3)


def test_csr_graph_by_hand_and_rows_with_fewer_neighbours_refused() -> None:
    """Distances 1 - s, ascending per row, clipped at 0 (s a hair above 1 from rounding);
    a padded row (-1) can't be one of cleanlab's k-neighbour rows."""
    g = KnnGraph(np.array([[2, 1], [0, 2], [1, 0]]),
                 np.array([[1.0005, 0.25], [0.5, -0.5], [0.75, 0.5]], np.float32))
    m = to_csr(g).toarray()
    np.testing.assert_allclose(m, [[0.0, 0.75, 0.0], [0.5, 0.0, 1.5], [0.5, 0.25, 0.0]],
                               atol=1e-6)
    assert to_csr(g).indices.tolist() == [2, 1, 0, 2, 1, 0]
    padded = KnnGraph(np.array([[1, 2], [0, -1], [1, 0]]),
                      np.array([[0.5, 0.2], [0.5, -np.inf], [0.3, 0.2]], np.float32))
    with pytest.raises(PairkitError, match="needs 2 neighbours per row; some rows have fewer"):
        to_csr(padded)


def test_a_float32_store_resolves_small_outliers(tmp_path: Path) -> None:
    """The outlier scale's floor is the stored dtype's rounding: 2e-6 on float32, so a row
    at mean distance ~2e-4 among rows at ~1e-6 is an outlier there (the float16 floor, 2e-3,
    would hide it)."""
    import pandas as pd

    from pairkit.eval.issues_command import issues_table

    x = same_rows(41)
    x[40] = 1.0 + 2e-2 * np.random.default_rng(3).normal(size=16)
    write_store(tmp_path / "s", l2_normalize(x), pd.DataFrame(
        {"path": [f"i{i}.png" for i in range(41)]}), dtype="float32")
    table, summary, _, _ = issues_table(tmp_path / "s", IssuesConfig())
    assert table["id"].tolist() == [40] and summary["outlier"] == 1


def test_issue_options_and_too_few_sources_are_refused() -> None:
    x = l2_normalize(np.eye(3, dtype=np.float32))
    with pytest.raises(UsageError, match="--outlier-z must be > 0, got 0"):
        find_issues(x, None, checks=("outlier",), outlier_z=0.0)
    with pytest.raises(PairkitError, match="issues needs at least 2 sources, the store has 1"):
        find_issues(x[:1], None, checks=("outlier",))
    found, graph, _ = find_issues(x[:2], None, checks=("outlier",))
    assert graph.ids.tolist() == [[1], [0]]
