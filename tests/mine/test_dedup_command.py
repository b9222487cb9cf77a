"""dedup_to_files (pairkit dedup's store-to-files step): option conflicts refused before
the store is opened, the table it writes is run_dedup's, a closed stdout is reported."""

from __future__ import annotations

import pytest

from pairkit.core.tables import read_table
from pairkit.errors import UsageError
from pairkit.mine.dedup import DedupConfig, run_dedup
from pairkit.mine.dedup_command import dedup_to_files
from tests.conftest import ClosedStdout, random_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return random_store(tmp_path_factory.mktemp("dedup") / "store", n_sources=40, views=2)


CFG = DedupConfig(threshold=0.9, keep="first")


def test_conflicts_are_refused_before_the_store_opens(tmp_path) -> None:
    missing = tmp_path / "no-store"
    with pytest.raises(UsageError, match="--print0 needs --paths-only"):
        dedup_to_files(missing, "-", CFG, print0=True)
    with pytest.raises(UsageError, match="--drop does not apply to --against"):
        dedup_to_files(missing, "-", CFG, against=missing, drop=True)


def test_the_table_written_is_run_dedups(store, tmp_path) -> None:
    table, expected = run_dedup(store.root, CFG)
    assert len(table) > 0  # the fixture has groups at 0.9
    out = tmp_path / "groups.parquet"
    summary = dedup_to_files(store.root, str(out), CFG, drop=True)
    written = read_table(str(out))
    assert written["id"].tolist() == table[~table["keep"]]["id"].tolist()
    assert {k: summary[k] for k in expected} == expected
    assert summary["stdout_closed"] is False


def test_a_closed_stdout_is_reported_not_raised(store, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdout", ClosedStdout())
    summary = dedup_to_files(store.root, "-", CFG, paths_only=True)
    assert summary["stdout_closed"] is True and summary["groups"] > 0
