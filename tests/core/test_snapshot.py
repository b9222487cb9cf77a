"""Readers during an append see the last committed snapshot, never a torn one."""

from __future__ import annotations

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store, l2_normalize
from pairkit.core.store_writer import write_store
from tests.proc import start_python

runner = CliRunner()
DIM = 32


def rows(ids: np.ndarray) -> np.ndarray:
    """Row ``i`` of the test store: a direction that only ``i`` has (for i < DIM**2)."""
    x = np.zeros((len(ids), DIM), np.float32)
    x[np.arange(len(ids)), ids % DIM] = 1.0
    x[np.arange(len(ids)), (ids // DIM) % DIM] += 0.5
    return x


def items(ids: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"path": [f"r{i}.jpg" for i in ids],
                         "source": [f"s{i // 2}" for i in ids], "view": ids % 2,
                         "label": [f"c{i % 3}" for i in ids]})


APPENDER = """
import numpy as np, sys
from pairkit.core.store_writer import StoreWriter
from tests.core.test_snapshot import rows, items
with StoreWriter.resume({root!r}) as w:
    print("appending", flush=True)
    for k in range({appends}):
        ids = np.arange(w.count, w.count + 7)
        w.append(rows(ids), items(ids))
        w.update(progress=k)   # a manifest rewrite without new rows, as embed does
print("done", flush=True)
"""


def check_snapshot(store: Store) -> None:
    """Items and vectors of one snapshot: same length, row i is item i."""
    n = store.count
    items_ = store.items
    vectors = store.vectors()
    assert len(items_) == len(vectors) == n
    expected = l2_normalize(rows(np.arange(n))).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(vectors, expected)
    assert items_["path"].tolist() == [f"r{i}.jpg" for i in range(n)]


def test_readers_during_appends_see_whole_snapshots(tmp_path):
    root = tmp_path / "s"
    ids = np.arange(14)
    write_store(root, rows(ids), items(ids), shard_rows=7)
    child = start_python(APPENDER.format(root=str(root), appends=30))
    assert child.stdout.readline().strip() == "appending"
    opened, counts = 0, set()
    while child.poll() is None or opened < 5:
        for verify in (True, False):
            store = Store.open(root, verify=verify)
            check_snapshot(store)
            counts.add(store.count)
            opened += 1
    assert child.wait(timeout=60) == 0, child.stderr.read()
    final = Store.open(root)
    check_snapshot(final)
    assert final.count == 14 + 30 * 7
    assert len(counts) > 2, counts  # the readers did overlap the appends
    names = sorted(p.name for p in root.iterdir())
    assert [n for n in names if n.startswith("items")] == [final.manifest["items"]["file"]]


def test_mine_during_appends(tmp_path):
    """The probe's CLI case: mine while a writer appends: every run exits 0 on a snapshot."""
    root = tmp_path / "s"
    ids = np.arange(40)
    write_store(root, rows(ids), items(ids), shard_rows=7)
    child = start_python(APPENDER.format(root=str(root), appends=20))
    assert child.stdout.readline().strip() == "appending"
    runs = 0
    while child.poll() is None or runs < 2:
        out = tmp_path / f"p{runs}.parquet"
        r = runner.invoke(app, ["mine", str(root), "--hard", "-o", str(out), "--index", "flat"])
        assert r.exit_code == 0, r.output
        table = pd.read_parquet(out)
        assert (table["anchor_path"] == "r" + table["anchor_id"].astype(str) + ".jpg").all()
        runs += 1
    assert child.wait(timeout=60) == 0, child.stderr.read()
