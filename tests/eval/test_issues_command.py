"""issues_to_files (pairkit issues' store-to-files step): its table and graph files match
what the detectors return for the store's sources, and a closed stdout is no error."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pairkit.core.tables import read_table
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


def test_a_closed_stdout_is_reported_not_raised(store, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdout", ClosedStdout())
    summary = issues_to_files(store.root, "-", IssuesConfig(k=5, all_rows=True))
    assert summary["stdout_closed"] is True and summary["sources"] == 30


def test_outputs_are_checked_before_any_work(store, tmp_path) -> None:
    out = tmp_path / "taken.csv"
    pd.DataFrame({"a": [1]}).to_csv(out)
    with pytest.raises(Exception, match="exists"):
        issues_to_files(store.root, str(out), IssuesConfig(k=5))
