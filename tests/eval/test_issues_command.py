"""issues_to_files (pairkit issues' store-to-files step): its table and graph files match
what the detectors return for the store's sources, and a closed stdout is no error."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pairkit.core.tables import read_table
from pairkit.errors import PairkitError, UsageError
from pairkit.eval.data_issues import IssuesConfig, find_issues
from pairkit.eval.issues_command import issues_to_files
from tests.conftest import ClosedStdout, random_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return random_store(tmp_path_factory.mktemp("issues") / "store", n_sources=30, views=2)


def test_table_is_the_detectors_verdict_on_view_0(store, tmp_path) -> None:
    out = tmp_path / "issues.csv"
    summary = issues_to_files(store.root, str(out), IssuesConfig(k=5, all_rows=True))
    table = read_table(str(out))
    view0 = np.flatnonzero(store.items["view"].to_numpy() == 0)  # one row per source
    labels = store.labels()
    assert labels is not None
    found, _, _ = find_issues(store.vectors(np.float32)[view0], labels[view0],
                              checks=("outlier", "label-error"), k=5)
    assert sorted(table["id"].unique().tolist()) == view0.tolist()
    for check, det in found.items():
        part = table[table["issue"] == check].set_index("id").loc[view0]
        np.testing.assert_allclose(part["score"].to_numpy(), det.score, rtol=1e-6)
        assert part["flagged"].tolist() == det.flag.tolist()
        assert summary[check] == int(det.flag.sum())
    assert summary["sources"] == len(view0) and summary["stdout_closed"] is False
    # by issue, then score descending, then id (docs: the worst first)
    want = table.sort_values(["issue", "score", "id"], ascending=[True, False, True])
    assert table["issue"].tolist() == want["issue"].tolist()
    assert table["id"].tolist() == want["id"].tolist()
    assert (np.diff(table[table["issue"] == "outlier"]["score"].to_numpy()) <= 0).all()


def test_a_closed_stdout_is_reported_not_raised(store, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdout", ClosedStdout())
    summary = issues_to_files(store.root, "-", IssuesConfig(k=5, all_rows=True))
    assert summary["stdout_closed"] is True and summary["sources"] == 30


def test_outputs_are_checked_before_any_work(store, tmp_path) -> None:
    out = tmp_path / "taken.csv"
    pd.DataFrame({"a": [1]}).to_csv(out)
    with pytest.raises(Exception, match="exists"):
        issues_to_files(store.root, str(out), IssuesConfig(k=5))


def test_an_existing_output_is_refused_before_the_store_is_read(store, tmp_path,
                                                                monkeypatch) -> None:
    import pairkit.eval.issues_command as command

    def no_work(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the store was read before the output was checked")

    monkeypatch.setattr(command, "issues_table", no_work)
    out = tmp_path / "taken.csv"
    out.write_text("a\n1\n")
    with pytest.raises(PairkitError, match="taken.csv exists"):
        issues_to_files(store.root, str(out), IssuesConfig(k=5))
    assert out.read_text() == "a\n1\n"


def test_label_error_asked_for_on_an_unlabeled_store_is_refused(tmp_path) -> None:
    """Found by a bug hunt (2026-12-06): `--checks outlier,label-error` spelled out was
    taken for the default (outlier only on an unlabeled store) and label-error silently
    dropped; the same two checks in the other order were the documented error. Both
    orders are refused (exit 2); not giving --checks runs outlier only."""
    from typer.testing import CliRunner

    from pairkit.cli.main import app
    from pairkit.core.store_writer import write_store

    x = np.random.default_rng(0).normal(size=(12, 4)).astype(np.float32)
    store = write_store(tmp_path / "nl", x, pd.DataFrame({"path": [f"r{i}.png"
                                                                   for i in range(12)]}))
    for checks in ("outlier,label-error", "label-error,outlier", "label-error"):
        r = CliRunner().invoke(app, ["issues", str(store.root), "--checks", checks, "-q"])
        assert r.exit_code == 2, (checks, r.output)
        assert r.stderr.strip() == ("error: label-error needs labels and the store has none: "
                                    "embed with --labels, or use --checks outlier")
    out = tmp_path / "o.csv"
    summary = issues_to_files(store.root, str(out), IssuesConfig(k=3, all_rows=True))
    assert set(read_table(str(out))["issue"]) == {"outlier"}
    assert "outlier" in summary and "label-error" not in summary
    with pytest.raises(UsageError, match="label-error needs labels"):
        issues_to_files(store.root, str(tmp_path / "o2.csv"),
                        IssuesConfig(k=3, checks=("outlier", "label-error")))
    assert not (tmp_path / "o2.csv").exists()


def test_graph_outputs_are_checked_before_the_store_is_read(store, tmp_path,
                                                            monkeypatch) -> None:
    """Found by a bug hunt (2026-12-06): the .npz suffix and an existing FILE.ids.npy
    were checked after the graph and both detectors ran (a missing store was reported
    before a --knn-graph typo)."""
    def no_work(*_a, **_k):  # noqa: ANN002, ANN003 - any call is the bug
        raise AssertionError("the store was read before the outputs were checked")

    monkeypatch.setattr("pairkit.core.store.Store.open", no_work)
    with pytest.raises(UsageError, match=r"^--knn-graph must end in \.npz, got .*g\.txt$"):
        issues_to_files(tmp_path / "nonexistent", "-",
                        IssuesConfig(knn_graph=str(tmp_path / "g.txt")))
    (tmp_path / "g.ids.npy").write_bytes(b"")
    with pytest.raises(PairkitError, match=r"g\.ids\.npy exists"):
        issues_to_files(store.root, str(tmp_path / "t.csv"),
                        IssuesConfig(knn_graph=str(tmp_path / "g.npz")))
    assert not (tmp_path / "g.npz").exists() and not (tmp_path / "t.csv").exists()
    monkeypatch.undo()
    issues_to_files(store.root, str(tmp_path / "t.csv"), IssuesConfig(
        k=3, knn_graph=str(tmp_path / "g.npz")), force=True)
    assert np.load(tmp_path / "g.ids.npy").tolist() == np.flatnonzero(
        store.items["view"].to_numpy() == 0).tolist()


def test_a_k_above_the_other_sources_is_said_cut(store, tmp_path) -> None:
    """Noticed in a bug hunt (2026-12-06): `--k` above the other sources was cut with only
    the summary's `k = N` to tell."""
    from pairkit.eval.issues_command import summary_line

    summary = issues_to_files(store.root, str(tmp_path / "i.csv"), IssuesConfig(k=100))
    assert summary["k"] == 29
    assert "(k = 29: --k 100 cut to the 29 other sources)" in summary_line(summary)
    small = issues_to_files(store.root, str(tmp_path / "j.csv"), IssuesConfig(k=5))
    assert "(k = 5)" in summary_line(small)
