"""A shard cut short on disk: refused with one line naming it, never a SIGBUS (exit 135).

Before a shard is memory-mapped its size is checked against the manifest and its header;
before its rows are read, against the header again (a file truncated while the store was
open, by another process).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.conftest import random_store
from tests.proc import REPO, child_env

runner = CliRunner()

# 400 rows of 16 float32: 25.7 kB, several pages, so rows past a cut at 4 kB are unbacked
SOURCES, DIM = 200, 16


@pytest.fixture
def cut_store(tmp_path: Path) -> Path:
    store = random_store(tmp_path / "store", n_sources=SOURCES, dim=DIM)
    (store.root / store.shards[0].file).open("r+b").truncate(4096)
    return store.root


@pytest.mark.parametrize("command", [
    ["info"], ["info", "--no-verify"], ["mine", "--hard", "-o", "{out}/p.csv"],
    ["eval", "--metrics", "knn"], ["search", "3", "-k", "2"],
])
def test_commands_refuse_a_truncated_shard_with_one_line(cut_store: Path, tmp_path: Path,
                                                         command: list[str]) -> None:
    args = [command[0], str(cut_store), *(a.format(out=tmp_path) for a in command[1:])]
    r = runner.invoke(app, args)
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert lines[-1] == (f"error: store {cut_store}: shard embeddings-00000.npy is 4096 "
                         f"bytes, manifest says {SOURCES * 2 * DIM * 4 + 128} (file changed "
                         "or damaged)"), r.output
    assert "Traceback" not in r.output and not (tmp_path / "p.csv").exists()


TRUNCATE_WHILE_OPEN = """
import os, sys
from pairkit.core.store import Store
from pairkit.errors import StoreError
store = Store.open(sys.argv[1], verify=False)
rows = store.rows()
os.truncate(os.path.join(sys.argv[1], store.shards[0].file), 4096)
for name, read in [("rows", lambda: rows[100:300]), ("row ids", lambda: rows.take([1, 399])),
                   ("vectors", store.vectors),
                   ("blocks", lambda: list(store.iter_blocks(rows=64)))]:
    try:
        read()
    except StoreError as exc:
        print(name, "|", exc)
    else:
        print(name, "| read")
"""


def test_a_shard_truncated_while_the_store_is_open_is_an_error_not_sigbus(
        tmp_path: Path) -> None:
    """Failed before: the child died with SIGBUS (returncode -7) at the first read."""
    root = random_store(tmp_path / "store", n_sources=SOURCES, dim=DIM).root
    proc = subprocess.run([sys.executable, "-c", TRUNCATE_WHILE_OPEN, str(root)], cwd=REPO,
                          env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    expected = (f"store {root}: shard embeddings-00000.npy is 4096 bytes, its header says "
                f"{SOURCES * 2 * DIM * 4 + 128} (truncated while the store was open; open it "
                "again to check it)")
    assert proc.stdout.splitlines() == [f"{name} | {expected}"
                                        for name in ("rows", "row ids", "vectors", "blocks")]


def test_rows_of_an_intact_shard_read_as_before(tmp_path: Path) -> None:
    import numpy as np

    store = random_store(tmp_path / "store", n_sources=SOURCES, dim=DIM)
    whole = store.vectors(np.float32)
    assert np.array_equal(store.rows()[:], whole)
    assert np.array_equal(np.concatenate([b for _, b in store.iter_blocks(rows=64)]), whole)


def test_a_shard_cut_by_one_row_while_open_is_an_error_not_zeros(tmp_path: Path) -> None:
    """A cut inside the mapping's last page raises no SIGBUS: the rows past the end read
    as zeros. The size check refuses it all the same, for any cut (hunt 3b: a check that
    let a cut of less than a page through survived)."""
    import os

    from pairkit.core.store import Store
    from pairkit.errors import StoreError

    root = random_store(tmp_path / "store", n_sources=SOURCES, dim=DIM).root
    store = Store.open(root, verify=False)
    rows = store.rows()
    size = SOURCES * 2 * DIM * 4 + 128
    os.truncate(root / store.shards[0].file, size - DIM * 4)  # the last row
    expected = (f"store {root}: shard embeddings-00000.npy is {size - DIM * 4} bytes, its "
                f"header says {size} (truncated while the store was open")
    for read in (lambda: rows[SOURCES * 2 - 2:], store.vectors):
        with pytest.raises(StoreError) as exc:
            read()
        assert str(exc.value).startswith(expected)
