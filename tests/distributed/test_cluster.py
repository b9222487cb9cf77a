"""``mine --ray HOST:PORT`` on a real two-node Ray cluster on this machine
(tests/raycluster.py: ``ray start --head`` and ``ray start --address``, 1 CPU each, own temp
dirs), the store and the table on the S3 test server: the worker node is killed (SIGKILL to
all its processes) while it holds a block of anchors, the block runs again on the head
node, and the table is the local run's: no anchor lost, none counted twice."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.tables import read_table
from tests.conftest import random_store
from tests.raycluster import ray_executable, two_nodes

pytest.importorskip("ray", reason="Ray is not installed: pip install 'pairkit[ray]' (CI "
                    "installs it with the dev extra, so this test runs there)")
if ray_executable() is None:
    pytest.skip("no `ray` command beside this Python", allow_module_level=True)

runner = CliRunner()


def ok(*args: object) -> None:
    r = runner.invoke(app, [*map(str, args)])
    assert r.exit_code == 0, r.output


def mine_killing_the_worker_node(cluster, hold, *args: object) -> str:
    """``pairkit mine ARGS --ray`` on ``cluster``, its worker node killed (every process)
    once that node's actor holds a block (``hold`` gets its file); returns the run's
    stderr, asserting it exited 0."""
    proc = cluster.pairkit("mine", *args, "--ray", cluster.address)
    try:
        deadline = time.monotonic() + 180
        while not list(hold.iterdir()):  # the worker node's actor holds a block
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no block reached the worker node"
            time.sleep(0.2)
        cluster.nodes[1].kill()
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    return err


def test_worker_node_killed_mid_mine(tmp_path, s3):
    st = random_store(tmp_path / "src", n_sources=150, views=2, dim=16, classes=5)
    np.save(tmp_path / "emb.npy", st.vectors())
    st.items.to_parquet(tmp_path / "items.parquet")
    common = [tmp_path / "emb.npy", "--items", tmp_path / "items.parquet", "--dtype", "float32"]
    ok("import", *common, "-o", tmp_path / "local")
    ok("import", *common, "-o", f"{s3}/store")
    args = ["--hard", "-k", "5", "--batch-size", "50"]
    ok("mine", tmp_path / "local", *args, "-o", tmp_path / "local.parquet", "-q")

    hold = tmp_path / "hold"
    hold.mkdir()
    # the worker node's actor keeps the first block it gets until the node is killed; the
    # head's waits for that before its first block (else it may mine them all first)
    with two_nodes(head_env={"PAIRKIT_TEST_WAIT_FOR_HOLD": str(hold)},
                   worker_env={"PAIRKIT_TEST_HOLD": str(hold)}) as cluster:
        err = mine_killing_the_worker_node(cluster, hold, f"{s3}/store", *args, "-o",
                                           f"{s3}/pairs/")
        assert f"blocks on Ray ({cluster.address}: 2 CPUs; 2 workers x 1 thread)" in err
        assert len(list(hold.iterdir())) == 1  # one block was in flight when the node died
        assert "index: flat on CPU, built on each worker" in err  # read the S3 store there
        alive = cluster.python(f"import ray; ray.init(address='{cluster.address}', "
                               "logging_level='ERROR'); "
                               "print(sum(n['Alive'] for n in ray.nodes()))")
        assert alive.stdout.split()[-1] == "1", alive.stderr  # the worker node is gone
        assert cluster.nodes[1].processes() == []
        # --ray local starts its own Ray instance, even where RAY_ADDRESS (or the latest
        # `ray start` on the machine) names a running cluster, which ray.init() would join
        proc = cluster.pairkit("mine", tmp_path / "local", *args, "-o",
                               tmp_path / "own.parquet", "--ray", "local",
                               env={"RAY_ADDRESS": cluster.address})
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "blocks on Ray (local: " in err
    got, want = read_table(f"{s3}/pairs/"), pd.read_parquet(tmp_path / "local.parquet")
    assert got["anchor_id"].nunique() == 300 and len(got) == 5 * 300
    pd.testing.assert_frame_equal(got, want)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "own.parquet"), want)


def test_worker_node_killed_mid_mine_with_the_rules(tmp_path, s3):
    """``mine --ray HOST:PORT --hard --filter-false-negatives -o FILE.parquet`` (the
    default rules and mined positives: the plan, with the vectors, the rules' context and
    the index, is made by a Ray task and kept in the object store, wherever it ran), the
    worker node killed while it holds a block: the run completes and the table is the
    local run's."""
    st = random_store(tmp_path / "src", n_sources=150, views=2, dim=16, classes=5)
    np.save(tmp_path / "emb.npy", st.vectors())
    st.items.drop(columns=["label"]).to_parquet(tmp_path / "items.parquet")
    common = [tmp_path / "emb.npy", "--items", tmp_path / "items.parquet", "--dtype", "float32"]
    ok("import", *common, "-o", f"{s3}/store")
    args = ["--hard", "-k", "5", "--batch-size", "50", "--filter-false-negatives"]
    ok("mine", f"{s3}/store", *args, "-o", tmp_path / "local.parquet", "-q")

    hold = tmp_path / "hold"
    hold.mkdir()
    with two_nodes(head_env={"PAIRKIT_TEST_WAIT_FOR_HOLD": str(hold)},
                   worker_env={"PAIRKIT_TEST_HOLD": str(hold)}) as cluster:
        mine_killing_the_worker_node(cluster, hold, f"{s3}/store", *args, "-o",
                                     tmp_path / "dist.parquet")
        assert len(list(hold.iterdir())) == 1
    got, want = read_table(tmp_path / "dist.parquet"), read_table(tmp_path / "local.parquet")
    assert (want["positive_kind"] == "mined").any()
    pd.testing.assert_frame_equal(got, want)
