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


def test_summary_counts_a_group_of_three_by_hand(tmp_path) -> None:  # noqa: ANN001
    """One-view store: rows 0, 1, 2 the same vector, row 3 alone: one group of three
    sources, one kept and two to drop (both near copies: no file hashes)."""
    import numpy as np
    import pandas as pd

    from pairkit.core.store_writer import write_store

    e = np.eye(4, dtype=np.float32)
    paths = [f"{i}.jpg" for i in range(4)]
    items = pd.DataFrame({"path": paths, "source": paths, "view": 0})
    write_store(tmp_path / "s", e[[0, 0, 0, 1]], items, encoder={"name": "test"},
                dtype="float32")
    table, s = run_dedup(tmp_path / "s", DedupConfig(threshold=0.99, keep="first",
                                                     method="threshold"))
    assert table["id"].tolist() == [0, 1, 2] and table["keep"].tolist() == [True, False, False]
    assert (s["groups"], s["sources_in_groups"], s["items_in_groups"], s["drop"],
            s["exact"], s["near"]) == (1, 3, 3, 2, 0, 2)


def test_summary_line_share_is_of_the_items() -> None:
    """With views, the share of the store is items in groups over items (9 of 12), not
    sources (4 of 6)."""
    from pairkit.mine.dedup import summary_line

    s = {"groups": 2, "sources_in_groups": 4, "sources": 6, "items_in_groups": 9,
         "items": 12, "drop": 2, "exact": 1, "near": 1, "split": 0, "threshold": 0.9,
         "decision": None, "keep": "first", "exact_only": False, "seconds": 1.31}
    assert summary_line(s) == (
        "2 groups: 4 of 6 sources in groups (9 items with views), 75.0% of the store; "
        "2 to drop (1 exact, 1 near copies), keep first, threshold 0.9, 0 chains split, "
        "1.3 s")


def image_store(tmp_path):  # noqa: ANN001, ANN201
    """An image folder of 6 random PNGs, two of them copied byte for byte, embedded."""
    import shutil

    import numpy as np
    from PIL import Image
    from typer.testing import CliRunner

    from pairkit.cli.main import app

    rng = np.random.default_rng(0)
    folder = tmp_path / "img"
    folder.mkdir()
    for i in range(6):
        Image.fromarray((rng.random((24, 24, 3)) * 255).astype("uint8")).save(folder / f"{i}.png")
    shutil.copy(folder / "0.png", folder / "0copy.png")
    shutil.copy(folder / "1.png", folder / "1copy.png")
    r = CliRunner().invoke(app, ["embed", str(folder), "-o", str(tmp_path / "st"), "--model",
                                 "pixels", "-q"])
    assert r.exit_code == 0, r.output
    return folder, tmp_path / "st"


def test_drop_leaves_out_copies_whose_files_changed_since_embed(tmp_path) -> None:  # noqa: ANN001
    """A listed copy overwritten since embed (another image now), and the copies of a
    kept file deleted since, are not listed for removal (failed before: both listed, so
    `xargs rm` deleted an image that had no other copy); one line says so."""
    import numpy as np
    from PIL import Image

    folder, st = image_store(tmp_path)
    cfg = DedupConfig(exact_only=True, keep="first")  # kept: the lowest id, 0.png, 1.png
    out = tmp_path / "drop.txt"
    dedup_to_files(st, str(out), cfg, paths_only=True, drop=True)
    assert out.read_text().split() == ["0copy.png", "1copy.png"]
    Image.fromarray(np.zeros((24, 24, 3), "uint8")).save(folder / "0copy.png")  # changed
    (folder / "1.png").unlink()  # the kept file of 1copy.png's group: gone
    notes: list[str] = []
    dedup_to_files(st, str(out), cfg, paths_only=True, drop=True, force=True,
                   warn=notes.append)
    assert out.read_text() == ""
    assert notes == ["--drop: 2 of 2 copies left out, their files no longer as embedded "
                     "(1 changed, 1 kept file changed or missing): rerun embed to refresh "
                     "the store, then dedup again"]
    (folder / "0copy.png").unlink()  # gone: nothing to remove
    dedup_to_files(st, str(out), cfg, paths_only=True, drop=True, force=True,
                   warn=notes.append)
    assert out.read_text() == "" and "1 missing" in notes[-1]
