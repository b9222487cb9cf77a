"""embed, mine, dedup and eval on a local Ray cluster (``ray.init(num_cpus=2)``, started
here, no network) give what the local path gives; a worker killed mid-job costs a retry,
not rows; a partition that fails for good leaves a store the next run completes."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.core.store_writer import write_store
from pairkit.core.tables import read_table
from tests.conftest import make_images, random_store
from tests.encode.test_webdataset import write_shards

ray = pytest.importorskip(
    "ray", reason="Ray is not installed: pip install 'pairkit[ray]' (CI installs it with the "
    "dev extra, so these tests run there)")

from pairkit.distributed.embed import RayEmbed  # noqa: E402 (after the skip)

runner = CliRunner()


@pytest.fixture(scope="module")
def cluster(request):
    from pairkit.distributed import connect

    with contextlib.suppress(pytest.skip.Exception):  # the S3 server's settings first,
        request.getfixturevalue("s3_endpoint")  # so that the workers inherit them
    # address "local": its own instance, never the cluster of another test process
    # (make test runs two) or of a `ray start` on this machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    try:
        yield connect("local")  # already connected: the command joins this cluster
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def store(tmp_path_factory, cluster):
    return random_store(tmp_path_factory.mktemp("ray") / "store", n_sources=150, views=2,
                        dim=16, classes=5)


def mined(st, cluster, cfg, fn=None, fmt="triplet", kind="auto"):
    from pairkit.distributed.pool import block_mapper
    from pairkit.index.options import IndexOptions
    from pairkit.mine.command import mine_store

    idx = IndexOptions(kind=kind, device="cpu", backend="faiss", nlist=8)
    here = mine_store(st, None, cfg, idx, fn, fmt)
    there = mine_store(st, None, cfg, idx, fn, fmt, map_blocks=block_mapper(cluster, "test"))
    return here, there


def same_stats(a: dict, b: dict) -> None:
    for key in ("anchors", "rows", "removed", "fn_flagged", "retries", "anchors_retried",
                "k_max", "neg_score", "rank_histogram", "attracted"):
        assert a.get(key) == b.get(key), key


@pytest.mark.parametrize("case", ["hard", "hard-ivf", "easy", "cluster-keep", "rules-attract",
                                  "outside-clusters", "outside-votes", "outside-labels",
                                  "outside-ivf"])
def test_mine_blocks_on_ray_equal_local(store, cluster, case):
    from pairkit.mine.config import MineConfig
    from pairkit.mine.false_negatives import FalseNegativeConfig

    cfg, fn, fmt, kind = MineConfig(batch_size=64), None, "triplet", "auto"
    if case == "hard-ivf":  # the IVF index built on each worker from the store it reads
        kind = "ivf"
    elif case == "easy":
        cfg = MineConfig(hard=False, batch_size=64, num_negatives=3)
    elif case == "cluster-keep":  # default rules: spectral clustering, near-duplicate groups
        cfg, fn, fmt = MineConfig(batch_size=64, fn_mode="keep"), FalseNegativeConfig(), "n-tuple"
    elif case == "rules-attract":  # the search that skips the anchor's clusters, retries
        cfg = MineConfig(batch_size=50, fn_mode="attract", sampling="softmax", range_max=40)
        fn = FalseNegativeConfig(rules=("near-duplicate", "margin", "cluster"),
                                 cluster_ks=(5,), cluster_runs=2)
        fmt = "labeled-pair"
    elif case == "outside-clusters":  # the masked search that never scores own clusters
        cfg = MineConfig(batch_size=64)
        fn = FalseNegativeConfig(rules=("near-duplicate", "cluster"))
    elif case == "outside-votes":  # rows sharing the anchor's cluster in 2 of 4 runs skipped
        fn = FalseNegativeConfig(rules=("near-duplicate", "cluster"), cluster_ks=(5,),
                                 cluster_runs=4, cluster_votes=2)
    elif case == "outside-labels":  # every row labelled: the anchor's label is not searched
        fn = FalseNegativeConfig()
    elif case == "outside-ivf":  # the IVF index scanned list by list with the same mask
        fn, kind = FalseNegativeConfig(rules=("near-duplicate", "cluster")), "ivf"
    (a, sa), (b, sb) = mined(store, cluster, cfg, fn, fmt, kind)
    if case.startswith("outside"):
        what = "label" if case == "outside-labels" else "cluster"
        assert f"not searched ({what} rule)" in sa["index"], sa["index"]
        assert sa["index"] == sb["index"]
    if case == "outside-votes":
        assert "at least 2 of 4" in sa["index"]
    if case in ("hard", "hard-ivf"):
        # the workers read the store and build the index (the driver ships neither)
        assert sb["index"] == sa["index"].replace("built now", "built on each worker")
    assert len(a) > 0
    pd.testing.assert_frame_equal(a, b)
    same_stats(sa, sb)


def test_mine_cli_writes_one_part_per_block(store, cluster, tmp_path):
    """``mine --ray local -o DIR/``: a parquet part per --batch-size anchors, read back as
    the table a local run writes to one file."""
    local, dist = tmp_path / "pairs.parquet", tmp_path / "pairs"
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "--batch-size", "100", "-o",
                            str(local)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "--batch-size", "100", "-o",
                            f"{dist}/", "--ray", "local"])
    assert r.exit_code == 0, r.output
    assert "blocks on Ray (local: 2 CPUs; 2 workers x 1 thread)" in r.output
    assert sorted(p.name for p in dist.iterdir()) == [f"part-0000{i}.parquet" for i in range(3)]
    assert pd.read_parquet(dist / "part-00000.parquet")["anchor_id"].nunique() == 100
    pd.testing.assert_frame_equal(read_table(dist), read_table(local))


def local_and_ray_with_a_crash(root, args, tmp_path, monkeypatch):
    """``mine ROOT ARGS`` here into ``local.parquet`` and with ``--ray local`` into
    ``dist.parquet`` while one worker dies mid-run; asserts both succeed with equal tables
    and returns their stats (local, ray)."""
    import json

    local, dist = tmp_path / "local.parquet", tmp_path / "dist.parquet"
    r = runner.invoke(app, ["mine", str(root), *args, "-o", str(local), "--stats",
                            str(tmp_path / "local.json")])
    assert r.exit_code == 0, r.output
    marker = tmp_path / "crashed"
    monkeypatch.setenv("PAIRKIT_TEST_CRASH_ONCE", str(marker))
    r = runner.invoke(app, ["mine", str(root), *args, "-o", str(dist), "--stats",
                            str(tmp_path / "dist.json"), "--ray", "local"])
    assert r.exit_code == 0, r.output
    assert marker.exists()  # a worker died
    pd.testing.assert_frame_equal(read_table(dist), read_table(local))
    return tuple(json.loads((tmp_path / f"{n}.json").read_text()) for n in ("local", "dist"))


def test_mine_cli_parquet_written_by_the_workers(store, cluster, tmp_path, monkeypatch):
    """``mine --ray local -o FILE.parquet``: the workers write their blocks' parts (the
    driver never holds the table) and the driver commits them into one file: the table and
    the stats are the local run's, also when a worker dies mid-run (its block is mined
    again and counted once)."""
    args = ["--hard", "--batch-size", "64", "--format", "n-tuple", "-q"]
    a, b = local_and_ray_with_a_crash(store.root, args, tmp_path, monkeypatch)
    # the local run to a parquet file is streamed from the shards (tests/mine/test_streamed.py)
    assert b["index"] == a["index"].replace("built now from the store's shards",
                                            "built on each worker")
    skip = {"seconds", "index", "ray"}
    assert {k: v for k, v in a.items() if k not in skip} == \
        {k: v for k, v in b.items() if k not in skip}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "crashed", "dist.json", "dist.parquet", "local.json", "local.parquet"]


def test_mine_cli_ivf_lists_split_over_the_workers(cluster, tmp_path, monkeypatch):
    """``mine --ray local --index ivf -o FILE.parquet`` on a store whose search is a float16
    IVF: its lists are split into one partition per worker (each worker reads only its
    cells' rows: pairkit/mine/ivf_parts.py), also when a worker dies mid-search; the
    table and the stats are the local run's."""
    st = random_store(tmp_path / "st", n_sources=1100, views=2, dim=16, classes=5,
                      dtype="float16")
    args = ["--hard", "--batch-size", "500", "--index", "ivf", "--nlist", "8", "--nprobe",
            "3", "--format", "n-tuple", "-q"]
    # the worker that dies runs the first task: a partition's search
    a, b = local_and_ray_with_a_crash(st.root, args, tmp_path, monkeypatch)
    assert "its lists in 2 partitions, each searched by one worker" in b["index"]
    skip = {"seconds", "index", "ray"}
    assert {k: v for k, v in a.items() if k not in skip} == \
        {k: v for k, v in b.items() if k not in skip}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def test_mine_cli_rules_whitened_lists_split_over_the_workers(cluster, tmp_path,
                                                              monkeypatch):
    """``mine --ray local --hard --filter-false-negatives --index ivf``: the rules'
    whitened neighbour lists are searched by the workers, their lists split
    (pairkit/mine/white_parts.py), also when a worker dies mid-search (the first task a
    worker runs is a partition's search); the plan merges them: the table and the stats
    are the local run's, and no candidate file is left."""
    st = random_store(tmp_path / "st", n_sources=1100, views=2, dim=16, classes=5,
                      dtype="float16")
    args = ["--hard", "--filter-false-negatives", "--batch-size", "500", "--index", "ivf",
            "--nlist", "8", "--nprobe", "3", "-q"]
    a, b = local_and_ray_with_a_crash(st.root, args, tmp_path, monkeypatch)
    assert "whitened_lists" in b["seconds"] and "whitened_lists" not in a["seconds"]
    assert a["mined_positives"]["rows"] > 0
    skip = {"seconds", "ray"}
    assert {k: v for k, v in a.items() if k not in skip} == \
        {k: v for k, v in b.items() if k not in skip}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def test_mine_cli_rules_planned_on_a_worker(store, cluster, tmp_path, monkeypatch):
    """``mine --ray local --hard --filter-false-negatives -o FILE.parquet`` (the default
    rules and mined positives): a Ray task plans the run with the vectors, the rules'
    context and the index, the workers write the parts; the driver never reads the
    vectors (refused here), and the table and stats are the local run's."""
    import json

    args = ["--hard", "--filter-false-negatives", "--batch-size", "64", "-q"]
    local, dist = tmp_path / "local.parquet", tmp_path / "dist.parquet"
    r = runner.invoke(app, ["mine", str(store.root), *args, "-o", str(local), "--stats",
                            str(tmp_path / "local.json")])
    assert r.exit_code == 0, r.output

    def refuse(self, dtype=np.float32):
        raise AssertionError("the driver read the vectors")

    monkeypatch.setattr(Store, "vectors", refuse)  # this process only: not the workers
    r = runner.invoke(app, ["mine", str(store.root), *args, "-o", str(dist), "--stats",
                            str(tmp_path / "dist.json"), "--ray", "local"])
    assert r.exit_code == 0, r.output
    a, b = read_table(local), read_table(dist)
    assert (a["positive_kind"] == "mined").any()
    pd.testing.assert_frame_equal(a, b)
    sa, sb = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("local", "dist"))
    assert sa["false_negative_rules"] and sa["fn_estimate"] and sa["mined_positives"]
    skip = {"seconds", "ray"}
    assert {k: v for k, v in sa.items() if k not in skip} == \
        {k: v for k, v in sb.items() if k not in skip}


def test_mine_ray_local_starts_ray_before_the_run():
    """``--ray local``: Ray is started before the run does any work, never while it
    runs in another thread: ray.init forks its processes, and a fork while another thread
    is in a BLAS call hung the driver in OpenBLAS's fork handler (``blas_thread_shutdown_``;
    seen with the false-negative context being built). In a fresh process (this one's
    Ray is already up)."""
    import subprocess
    import sys

    code = ("import ray\n"
            "from pairkit.distributed.mine import on_ray\n"
            "def run(map_blocks):\n"
            "    assert ray.is_initialized(), 'run before ray.init'\n"
            "    return None, {}\n"
            "print(on_ray('local', run)[1]['ray'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("Ray (local:")


def test_mine_ray_damaged_store_leaves_no_output(tmp_path, cluster):
    """A shard damaged after the driver opened the store: the plan (made by a Ray task,
    which verifies the store) refuses it in one line, no output nor temp folder is left;
    with the store repaired the rerun writes the table."""
    st = random_store(tmp_path / "store", n_sources=40, views=2, dim=8, classes=4)
    shard = next((tmp_path / "store").glob("embeddings-*.npy"))
    good = shard.read_bytes()
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    shard.write_bytes(bytes(bad))
    out = tmp_path / "out" / "pairs.parquet"
    r = runner.invoke(app, ["mine", str(st.root), "--hard", "-o", str(out), "--ray", "local"])
    assert r.exit_code == 1 and "checksum mismatch" in r.output, r.output
    assert list((tmp_path / "out").iterdir()) == []
    shard.write_bytes(good)
    r = runner.invoke(app, ["mine", str(st.root), "--hard", "-o", str(out), "--ray", "local"])
    assert r.exit_code == 0, r.output
    assert len(read_table(out)) == 5 * 80


def test_worker_killed_mid_mine(store, cluster, tmp_path, monkeypatch):
    """The first block's worker process exits mid-job (os._exit): Ray restarts the actor,
    the block is mined again, and the table is the local one, no row lost or doubled."""
    from pairkit.mine.config import MineConfig

    marker = tmp_path / "crashed"
    monkeypatch.setenv("PAIRKIT_TEST_CRASH_ONCE", str(marker))
    (a, sa), (b, sb) = mined(store, cluster, MineConfig(batch_size=64))
    assert marker.exists()  # the crash happened
    pd.testing.assert_frame_equal(a, b)
    same_stats(sa, sb)


def dedup_table(st, ray=None, per_part=None, scratch=None):
    from pairkit.distributed.dedup import RayPairs
    from pairkit.mine.dedup import DedupConfig, run_dedup

    pairs = RayPairs(ray, rows_per_part=per_part, scratch=scratch) if ray else None
    table, summary = run_dedup(str(st.root), DedupConfig(threshold=0.9, keep="central",
                                                         batch_size=64), pairs=pairs)
    return table, summary


def test_dedup_edges_on_ray_equal_local(tmp_path, cluster, monkeypatch):
    rng = np.random.default_rng(3)
    base = rng.normal(size=(120, 12))
    rows = np.concatenate([base, base[:40] + 0.05 * rng.normal(size=(40, 12)),
                           base[:10] + 0.02 * rng.normal(size=(10, 12))])
    items = pd.DataFrame({"path": [f"i{k:03d}.jpg" for k in range(len(rows))]})
    st = write_store(tmp_path / "st", rows.astype(np.float32), items, dtype="float32")
    a, sa = dedup_table(st)
    monkeypatch.setattr("pairkit.index.partitioned_range.WORK_GAIN", 0.0)  # partitions
    monkeypatch.setenv("PAIRKIT_TEST_CRASH_ONCE", str(tmp_path / "crashed"))
    b, sb = dedup_table(st, ray="local", per_part=20)
    assert (tmp_path / "crashed").exists()
    assert sa["groups"] >= 10 and sa["split"] == sb["split"]
    assert sb["ray"].startswith("Ray (local")
    pd.testing.assert_frame_equal(a, b)


@contextlib.contextmanager
def driver_reads(monkeypatch):
    """Within: this process (the driver, not the workers) refuses the store's float32
    copy and the parsed item table (the columns it needs are read as codes:
    :mod:`pairkit.core.columns`), and lists the row counts of every read of rows on demand
    (``RowView.take``).
    Yields ``(the monkeypatch context, that list)``."""
    from pairkit.core.row_view import RowView

    taken: list[int] = []
    real_take = RowView.take

    def counted(self, positions):
        taken.append(len(positions))
        return real_take(self, positions)

    def refuse(*a, **kw):
        raise AssertionError("the driver made the store's float32 copy")

    def no_table(self):
        raise AssertionError("the driver parsed the item table (a Python object per item)")

    with monkeypatch.context() as m:
        m.setattr(Store, "vectors", refuse)
        m.setattr(Store, "items", property(no_table))
        m.setattr(RowView, "take", counted)
        yield m, taken


def planted_dups(tmp_path, where, dim=12):
    """A store of 200 rows, 50 of them near-copies of others: at ``where`` (a folder or
    an s3:// URL), float16, two shards at least."""
    rng = np.random.default_rng(5)
    base = rng.normal(size=(150, dim))
    rows = np.concatenate([base, base[:40] + 0.05 * rng.normal(size=(40, dim)),
                           base[:10] + 0.02 * rng.normal(size=(10, dim))])
    items = pd.DataFrame({"path": [f"i{k:03d}.jpg" for k in range(len(rows))]})
    return write_store(where, rows.astype(np.float32), items, dtype="float16", shard_rows=64)


@pytest.mark.parametrize("on", ["folder", "s3"])
def test_dedup_on_ray_reads_only_the_candidates_on_the_driver(tmp_path, cluster, request,
                                                              monkeypatch, on):
    """``dedup --ray``: the workers read the store for the search themselves; the driver
    never makes the store's float32 copy, and reads only the rows of the sources that
    have a near-duplicate (in one pass); the table is the local run's, from a folder and
    from object storage."""
    where = str(tmp_path / "st") if on == "folder" else f"{request.getfixturevalue('s3')}/st"
    st = planted_dups(tmp_path, where)
    want, sw = dedup_table(st)
    with driver_reads(monkeypatch) as (m, taken):  # this process only: not the workers
        # searched by partitions however little they save (the plan is made here)
        m.setattr("pairkit.index.partitioned_range.WORK_GAIN", 0.0)
        got, sg = dedup_table(st, ray="local", per_part=25)
    pd.testing.assert_frame_equal(got, want)
    assert sg["groups"] == sw["groups"] >= 40 and sg["split"] == sw["split"]
    assert "partitions of at most" in sg["ray"] and "searched by partitions" in sg["ray"]
    parts = int(sg["ray"].split(" k-means partitions")[0].rsplit(" ", 1)[1])
    assert parts >= 4  # searched by partitions, not as one set
    # here: the k-means sample (64 a partition: all 200 rows) once, then only the grouped
    assert len(taken) == 2 and taken[1] <= 110  # sources' rows (100 of 200), in one pass
    args = ["dedup", where, "--threshold", "0.9", "-o", "-", "-q"]
    here = runner.invoke(app, args)
    there = runner.invoke(app, [*args, "--ray", "local"])
    assert here.exit_code == 0 and there.exit_code == 0, there.output
    assert there.stdout == here.stdout and here.stdout.count("near") >= 40


def store_and_output(tmp_path, request, on: str) -> tuple[str, str]:
    """A store's location and an output folder beside it, both local or both on the
    local S3 server."""
    root = str(tmp_path) if on == "folder" else request.getfixturevalue("s3")
    if on == "folder":
        (tmp_path / "out").mkdir()
    return f"{root}/st", f"{root}/out"


def scratch_left(where: str) -> list[str]:
    """The route files' scratch folders (and files) under ``where``."""
    from pairkit.core.remote import filesystem, is_url

    if not is_url(where):
        return [p.name for p in Path(where).rglob("*") if "dedup-routes" in str(p)]
    fs, path = filesystem(where)
    fs.invalidate_cache()
    return [name for name in fs.find(path, withdirs=True) if "dedup-routes" in name]


@pytest.mark.parametrize("on", ["folder", "s3"])
def test_dedup_on_ray_keeps_the_routes_on_the_workers(tmp_path, cluster, request,
                                                      monkeypatch, on):
    """``dedup --ray`` by partitions: the route blocks write their routes into a scratch
    folder beside the output (never under the store, the run's input) and send the
    driver their counts only (two (k,) arrays and a flag a block, never a row id); the
    folder is gone after the run, and the table is the local run's."""
    from pairkit.distributed.pool import BlockPool

    where, out = store_and_output(tmp_path, request, on)
    st = planted_dups(tmp_path, where)
    want, _ = dedup_table(st)
    received: list = []
    real_map = BlockPool.map

    def recorded(self, shared, blocks, fn=None, last=True):
        for result in real_map(self, shared, blocks, fn, last):
            received.append(((fn or self.args[0]).__name__, result))
            yield result

    during: list = []
    with monkeypatch.context() as m:  # this process only: what the driver receives
        m.setattr("pairkit.index.partitioned_range.WORK_GAIN", 0.0)
        m.setattr(BlockPool, "map", recorded)
        real_work = __import__("pairkit.index.partitioned_range",
                               fromlist=["Plan"]).Plan.work_list

        def work_list(plan):
            during.extend(scratch_left(out))  # the routes, written beside the output
            assert scratch_left(where) == []  # nothing under the store
            return real_work(plan)

        m.setattr("pairkit.index.partitioned_range.Plan.work_list", work_list)
        got, sg = dedup_table(st, ray="local", per_part=25, scratch=out)
    pd.testing.assert_frame_equal(got, want)
    assert "searched by partitions" in sg["ray"]
    names = [name for name, _ in received]
    routes = [r for name, r in received if name == "write_routes"]
    assert routes and "route_block" not in names and "search_part" in names
    k = len(routes[0][0])
    for routed, members, within in routes:
        assert routed.shape == members.shape == (k,) and within is True
    assert any(".dedup-routes." in name for name in during)
    assert any(name.endswith(".bin") for name in during)
    assert scratch_left(out) == [] and scratch_left(where) == []


def test_dedup_on_ray_failing_block_leaves_no_output_nor_routes(tmp_path, cluster,
                                                                 monkeypatch):
    """A search block that fails for good (here: its routes' file is missing) stops
    ``dedup --ray`` in one line with no output, and the routes' scratch folder is removed
    as after a run that succeeds."""
    import pairkit.index.partitioned_range as pr

    st = planted_dups(tmp_path, str(tmp_path / "st"))
    real_work = pr.Plan.work_list

    def broken(plan):  # every task reads a block that was never written
        return [(j, blocks + 1000, starts, counts) for j, blocks, starts, counts
                in real_work(plan)]

    out = tmp_path / "groups.parquet"
    with monkeypatch.context() as m:
        m.setattr(pr, "WORK_GAIN", 0.0)
        m.setattr(pr.Plan, "work_list", broken)
        m.setattr(pr, "ROWS_PER_PART", 25)  # read by RayPairs: partitions on 200 rows
        r = runner.invoke(app, ["dedup", str(st.root), "--threshold", "0.9", "-o", str(out),
                                "--ray", "local"])
    assert r.exit_code == 1, r.output
    assert "routes-01000.bin" in r.output and "Traceback" not in r.output
    assert not out.exists() and list(tmp_path.glob(".groups*")) == []
    assert scratch_left(str(tmp_path)) == []  # beside the output, where they were written


@pytest.mark.parametrize("keep", ["first", "best"])
def test_dedup_on_ray_views_and_file_hashes_from_codes(tmp_path, cluster, monkeypatch, keep):
    """``dedup --ray``'s driver reads sources, views and file hashes as codes and paths
    one by one: with two views a source, exact copies by hash (one of them far apart in
    the embedding), hashes missing or empty, the table and summary are the local run's."""
    rng = np.random.default_rng(8)
    base = rng.normal(size=(60, 10))
    src = np.concatenate([base, base[:15] + 0.03 * rng.normal(size=(15, 10))])
    rows = np.repeat(src, 2, axis=0) + 0.01 * rng.normal(size=(150, 10))
    sha = [f"h{i // 2}" if i % 7 else None for i in range(150)]
    sha[100], sha[101], sha[2], sha[3] = "same", "same", "same", ""  # exact copies
    sha[4] = ""
    items = pd.DataFrame({"path": [f"d{i % 3}/img{i // 2:03d}_{'ab'[i % 2]}.jpg"
                                   for i in range(150)],
                          "source": [f"s{i // 2}" for i in range(150)], "view": np.arange(150) % 2,
                          "file_sha256": sha})
    st = write_store(tmp_path / "st", rows.astype(np.float32), items, dtype="float32")
    from pairkit.distributed.dedup import RayPairs
    from pairkit.mine.dedup import DedupConfig, run_dedup

    cfg = DedupConfig(threshold=0.9, keep=keep, batch_size=64)
    want, sw = run_dedup(str(st.root), cfg)
    with driver_reads(monkeypatch):
        got, sg = run_dedup(str(st.root), cfg, pairs=RayPairs("local"))
    pd.testing.assert_frame_equal(got, want)
    assert (want["match"] == "exact").any() and (want["match"] == "near").sum() >= 10
    assert {k: v for k, v in sg.items() if k != "ray"} == \
        {k: v for k, v in sw.items() if k != "ray"}


@pytest.mark.parametrize("on", ["folder", "s3"])
def test_dedup_on_ray_global_search_by_tiles(tmp_path, cluster, request, monkeypatch, on):
    """``dedup --ray`` when the partitions would not cut the work (the plan falls back to
    the global search): tiles of blocks of rows on the workers, each task reading its
    blocks from the store; the driver never makes the store's float32 copy, and the table
    is the local run's, from a folder and from object storage."""
    where = str(tmp_path / "st") if on == "folder" else f"{request.getfixturevalue('s3')}/st"
    st = planted_dups(tmp_path, where)
    want, sw = dedup_table(st)
    with driver_reads(monkeypatch) as (m, taken):  # this process only: not the workers
        got, sg = dedup_table(st, ray="local")
    pd.testing.assert_frame_equal(got, want)
    assert sg["groups"] == sw["groups"] >= 40 and sg["split"] == sw["split"]
    assert "searched globally" in sg["ray"]
    # 200 rows, --batch-size 64, 2 workers x 4 tasks: 4 blocks of 50 rows, 10 tiles (the
    # planted copies 150-199 of rows 0-49: pairs across blocks)
    assert "4 blocks of at most 50 sources, 10 tiles" in sg["ray"]
    # here: the k-means sample of the plan (64 rows), then only the grouped sources'
    # rows (100 of 200) in one pass; no block of a tile
    assert len(taken) == 2 and taken[0] <= 64 and taken[1] <= 110


def test_dedup_to_stdout_on_several_machines_searches_by_tiles(tmp_path, cluster,
                                                               monkeypatch):
    """``dedup --ray`` with ``-o -`` (no folder for the routes: they would go to this
    machine's temp folder, which other machines' workers can't read) on a cluster of
    several machines: the search by tiles, which needs no files, instead of partitions
    that pay; the summary says why, the table is the local run's, and no route file is
    written. On one machine the partitions still run (the temp folder is everyone's)."""
    import dataclasses
    import tempfile

    import pairkit.distributed as dist

    assert cluster.nodes == 1  # counted when joined: ray.init here is one machine
    st = planted_dups(tmp_path, str(tmp_path / "st"))
    want, _ = dedup_table(st)
    monkeypatch.setattr("pairkit.index.partitioned_range.WORK_GAIN", 0.0)  # partitions pay
    real_connect = dist.connect
    made: list = []
    real_routes = __import__("pairkit.index.route_files",
                             fromlist=["scratch_routes"]).scratch_routes

    def counted(where):
        made.append(where)
        return real_routes(where)

    monkeypatch.setattr("pairkit.index.route_files.scratch_routes", counted)
    for nodes in (2, 1):
        monkeypatch.setattr(dist, "connect", lambda address, n=nodes: dataclasses.replace(
            real_connect(address), nodes=n))
        got, summary = dedup_table(st, ray="local", per_part=25)  # scratch None: -o -
        pd.testing.assert_frame_equal(got, want)
        if nodes == 2:
            assert "not by partitions: their routes need a folder all 2 machines" in (
                summary["ray"])
            assert summary["ray"].endswith(" tiles") and made == []
        else:
            assert "searched by partitions" in summary["ray"] and made == [None]
    assert not [p for p in Path(tempfile.gettempdir()).glob("*dedup-routes*")
                if p.stat().st_mtime > st.root.stat().st_mtime]


def test_sharded_search_equals_exact_search_with_ties(cluster):
    """Duplicate rows in several shards: the merged top-k keeps the lowest ids, as the
    exact search does."""
    from pairkit.distributed.search import RayShardedIndex
    from pairkit.index.search import knn_search

    rng = np.random.default_rng(1)
    x = rng.normal(size=(90, 8)).astype(np.float32)
    x[45:] = x[:45]  # every row twice, one copy in each shard
    x[::7] = x[3]  # and a big tie group across both
    q = np.concatenate([x[:20], rng.normal(size=(10, 8)).astype(np.float32)])
    index = RayShardedIndex(x, cluster)
    try:
        for k in (1, 7, 90, 95):
            s1, i1 = knn_search(q, x, k)
            s2, i2 = index.search(q, k)
            np.testing.assert_array_equal(i1, i2)
            np.testing.assert_array_equal(s1, s2)
    finally:
        index.close()


def test_eval_on_ray_equals_local(store, cluster, tmp_path):
    args = ["eval", str(store.root), "--json", "-q", "--knn-k", "5,20", "--metrics",
            "knn,retrieval,geometry", "--batch-size", "64"]
    local = runner.invoke(app, args)
    dist = runner.invoke(app, [*args, "--ray", "local"])
    assert local.exit_code == 0 and dist.exit_code == 0, dist.output
    assert dist.stdout == local.stdout
    assert '"knn_top1"' in local.stdout
    shown = runner.invoke(app, [*args[:2], "--knn-k", "5", "--metrics", "knn", "--ray", "local"])
    assert shown.exit_code == 0 and "searches on Ray (" in shown.stderr  # said, as mine does


@pytest.mark.parametrize("on", ["folder", "s3"])
def test_eval_on_ray_leaves_the_references_to_the_workers(store, cluster, tmp_path, request,
                                                          monkeypatch, on):
    """``eval --ray`` with the linear probe (on S3 with a head and ``--compare`` too): each
    actor reads its shard of the references from the store (through the head) itself; the
    driver never makes the store's float32 copy nor holds every query: it reads the queries
    a block at a time, the probe's sample of references and the geometry's sample of
    queries, from a folder and from object storage. The metrics are the local run's."""
    import json

    from tests.cli.test_eval import write_head

    where = str(store.root)
    if on == "s3":
        where = f"{request.getfixturevalue('s3')}/st"
        write_store(where, store.vectors(), store.items[["path", "source", "view", "label"]],
                    encoder=store.encoder, dtype=store.dtype, shard_rows=100)
    rng = np.random.default_rng(0)
    write_head(tmp_path / "head", rng.normal(size=(8, 16)).astype(np.float32))
    args = ["eval", where, "--json", "-q", "--knn-k", "5", "--probe-max-train", "60",
            "--batch-size", "16"]
    if on == "s3":  # the head and --compare once (each costs the cluster's start-up)
        args += ["--head", str(tmp_path / "head"), "--compare"]
    local = runner.invoke(app, args)
    assert local.exit_code == 0, local.output
    with driver_reads(monkeypatch) as (m, taken):  # this process only: not the workers
        dist = runner.invoke(app, [*args, "--ray", "local"])
    assert dist.exit_code == 0, dist.output
    want, got = json.loads(local.stdout), json.loads(dist.stdout)
    flat_want, flat_got = pd.json_normalize(want).iloc[0], pd.json_normalize(got).iloc[0]
    assert list(flat_got.index) == list(flat_want.index)
    assert ("head.linear_top1" in flat_want and "raw.knn_top1" in flat_want
            if on == "s3" else "linear_top1" in flat_want)
    for key, value in flat_want.items():
        assert flat_got[key] == pytest.approx(value, abs=1e-6), key
    # per run, the queries a block of --batch-size rows at a time, twice (the search and
    # the probe's predictions), never all at once, and again, a block at a time, those
    # whose fetched neighbours were all of their class (the hardest negative's deeper
    # search); the probe's 60 references once; the geometry's sampled queries once (the
    # head's queries are read through the head)
    runs = [want["raw"], want["head"]] if on == "s3" else [want]
    n_q = runs[0]["n_queries"]
    assert n_q > 16
    blocks = [t for t in taken if t <= 16]
    assert 2 * n_q * len(runs) <= sum(blocks) <= 3 * n_q * len(runs), taken
    assert sorted(t for t in taken if t > 16) == sorted([60, n_q] * len(runs)), taken


def embed_cfg(images, out, **extra):
    from pairkit.encode.embedder import EmbedConfig

    return EmbedConfig(images=images, store=out, model="pixels", views=2, labels=None,
                       shard_rows=6, batch_size=4, **extra)


def same_store(a: Path, b: Path) -> None:
    sa, sb = Store.open(a), Store.open(b)
    pd.testing.assert_frame_equal(sa.items, sb.items)
    np.testing.assert_array_equal(sa.vectors(), sb.vectors())
    assert sa.read_errors() == sb.read_errors()
    assert sa.manifest["image_root"] == sb.manifest["image_root"]
    assert sa.manifest["labels"] == sb.manifest["labels"]


def test_embed_on_ray_equals_local_folder_and_shards(tmp_path, cluster, monkeypatch):
    """An image folder with a broken file, and the same images as webdataset shards: the
    Ray run writes the local run's store (rows, order, vectors, errors); a worker killed
    during the folder run is retried."""
    from pairkit.encode.embedder import embed_folder

    images = make_images(tmp_path / "img", n_per_class=4, classes=3)
    (tmp_path / "img" / "class1" / "broken.jpg").write_bytes(b"\xff\xd8 not really")
    local = embed_folder(embed_cfg(tmp_path / "img", tmp_path / "local"))
    monkeypatch.setenv("PAIRKIT_TEST_CRASH_ONCE", str(tmp_path / "crashed"))
    dist = embed_folder(embed_cfg(tmp_path / "img", tmp_path / "ray"),
                        executor=RayEmbed("local"))
    assert (tmp_path / "crashed").exists()
    assert (dist.images, dist.views, dist.skipped) == (local.images, local.views, 1) == (12, 24, 1)
    # the device is the workers' device, as --json gives it; the cluster beside it
    assert dist.device == "cpu" and dist.cluster.startswith("Ray (local: ")
    assert local.cluster is None
    # partitions of 6 rows / 2 views = 3 files: 13 files (one broken) in 5 shards
    assert [s.rows for s in Store.open(tmp_path / "ray").shards] == [6, 4, 6, 6, 2]
    same_store(tmp_path / "local", tmp_path / "ray")
    monkeypatch.delenv("PAIRKIT_TEST_CRASH_ONCE")
    write_shards(tmp_path / "wds", images, per_shard=5)
    spec = tmp_path / "wds" / "{00000..00002}.tar"
    embed_folder(embed_cfg(spec, tmp_path / "wlocal"))
    embed_folder(embed_cfg(spec, tmp_path / "wray"), executor=RayEmbed("local"))
    same_store(tmp_path / "wlocal", tmp_path / "wray")
    assert Store.open(tmp_path / "wray").manifest["labels"] == "webdataset"


def test_failed_partition_leaves_a_resumable_store(tmp_path, cluster, monkeypatch):
    """A partition whose worker dies with no retry left: the run commits the others and
    stops with one line; the rerun embeds the rest. No row lost, none doubled."""
    from pairkit.encode.embedder import embed_folder
    from pairkit.errors import PairkitError

    make_images(tmp_path / "img", n_per_class=4, classes=3)
    embed_folder(embed_cfg(tmp_path / "img", tmp_path / "local"))
    monkeypatch.setattr("pairkit.distributed.embed.RETRIES", 0)
    monkeypatch.setenv("PAIRKIT_TEST_CRASH_ONCE", str(tmp_path / "crashed"))
    with pytest.raises(PairkitError, match=r"1 of 4 partitions \(3 images\) failed on the Ray "
                                           r"workers .*rerun the command to embed the rest"):
        embed_folder(embed_cfg(tmp_path / "img", tmp_path / "ray"), executor=RayEmbed("local"))
    part = Store.open(tmp_path / "ray")
    assert part.count == 18  # 3 of 4 partitions: 9 images x 2 views
    assert part.items.groupby("path").size().eq(2).all()  # each image once, both views
    again = embed_folder(embed_cfg(tmp_path / "img", tmp_path / "ray"),
                         executor=RayEmbed("local"))
    assert (again.images, again.already) == (3, 9)
    full, ref = Store.open(tmp_path / "ray"), Store.open(tmp_path / "local")
    key = ["path", "view"]
    assert not full.items.duplicated(key).any()
    a = full.items.reset_index().sort_values(key)
    b = ref.items.reset_index().sort_values(key)
    assert a[key].values.tolist() == b[key].values.tolist()
    np.testing.assert_array_equal(full.vectors()[a["index"]], ref.vectors()[b["index"]])


def test_embed_and_mine_on_ray_with_s3(tmp_path, cluster, s3, monkeypatch):
    """Images on S3, the store on S3: the workers read the images and put their shards
    straight into the bucket, the driver commits them (a worker killed once on the way);
    the store is the local run's. ``mine --ray`` of it writes its parts to S3."""
    import os

    import s3fs

    from pairkit.encode.embedder import embed_folder

    make_images(tmp_path / "img", n_per_class=4, classes=3)
    f = s3fs.S3FileSystem(client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
    for p in sorted(q for q in (tmp_path / "img").rglob("*") if q.is_file()):
        f.pipe_file(f"{s3[5:]}/img/{p.relative_to(tmp_path / 'img').as_posix()}",
                    p.read_bytes())
    embed_folder(embed_cfg(tmp_path / "img", tmp_path / "local"))
    monkeypatch.setenv("PAIRKIT_TEST_CRASH_ONCE", str(tmp_path / "crashed"))
    embed_folder(embed_cfg(f"{s3}/img", f"{s3}/st"), executor=RayEmbed("local"))
    assert (tmp_path / "crashed").exists()
    a, b = Store.open(tmp_path / "local"), Store.open(f"{s3}/st")
    np.testing.assert_array_equal(a.vectors(), b.vectors())
    pd.testing.assert_frame_equal(a.items, b.items)
    monkeypatch.delenv("PAIRKIT_TEST_CRASH_ONCE")
    args = ["--hard", "--batch-size", "8", "-q"]
    local = runner.invoke(app, ["mine", str(tmp_path / "local"), *args, "-o",
                                str(tmp_path / "p.parquet")])
    dist = runner.invoke(app, ["mine", f"{s3}/st", *args, "-o", f"{s3}/pairs/", "--ray",
                               "local"])
    assert local.exit_code == 0 and dist.exit_code == 0, dist.output
    got, want = read_table(f"{s3}/pairs/"), pd.read_parquet(tmp_path / "p.parquet")
    assert (got["store_id"] == b.content_id).all()  # shards cut otherwise: another id
    pd.testing.assert_frame_equal(got.drop(columns="store_id"), want.drop(columns="store_id"))


@pytest.mark.parametrize("case", ["plain", "rules", "split", "rules-split"])
def test_mine_s3_store_to_s3_parts_never_on_the_driver(store, cluster, s3, tmp_path,
                                                       monkeypatch, case):
    """``mine s3://…/st --ray local -o s3://…/pairs/``: the driver reads the store's
    manifest only (fetching a shard is refused here), the workers put their blocks'
    parts and score keys straight into the output prefix under the run's token, and the
    driver commits them with one conditional ``_pairkit_parts.json`` (building the table
    is refused here): the table and stats are the local run's, no other object is left,
    and a second run without --force is refused in one line. ``split``: a float16 IVF
    search, its lists split over the workers (the partitions' candidates are objects
    beside the parts, gone after the commit)."""
    import json

    import pairkit.core.pairs as pairs_module
    import pairkit.core.remote_store as remote_store
    from pairkit.core.remote import list_names, read_bytes

    rules = case.startswith("rules")
    args = ["--hard", "--batch-size", "64", "-q"] + (["--filter-false-negatives"] if rules
                                                       else [])
    if case == "rules-split":  # the rules' whitened lists searched by the workers: their
        # candidates are objects beside the parts, gone once the plan has merged them
        store = random_store(tmp_path / "st16", n_sources=1100, views=2, dim=16, classes=5,
                             dtype="float16")
        args += ["--index", "ivf", "--nlist", "8", "--nprobe", "3"]
    if case == "split":  # lists of >= 256 rows on average: pairkit/mine/ivf_parts.py
        store = random_store(tmp_path / "st16", n_sources=1100, views=2, dim=16, classes=5,
                             dtype="float16")
        args = ["--hard", "--batch-size", "500", "--index", "ivf", "--nlist", "8",
                "--nprobe", "3", "-q"]
        # checked pieces of 1 KiB (in the manifest): the blocks of anchors then read their
        # rows by byte ranges on the workers (their views lie side by side)
        import pairkit.core.store_writer as store_writer

        monkeypatch.setattr(store_writer, "SHARD_BLOCK_BYTES", 1024)
        monkeypatch.setattr(remote_store, "SHARD_BLOCK_BYTES", 1024)
    cols = ["path", "source", "view", "label"]
    write_store(f"{s3}/st", store.vectors(), store.items[cols], encoder=store.encoder,
                dtype=store.dtype)
    r = runner.invoke(app, ["mine", str(store.root), *args, "-o", str(tmp_path / "p.parquet"),
                            "--stats", str(tmp_path / "local.json")])
    assert r.exit_code == 0, r.output

    def refuse(*a, **kw):
        raise AssertionError("the driver read a shard or built the table")

    with monkeypatch.context() as m:  # this process only: not the workers
        m.setattr(remote_store, "shard_array", refuse)
        m.setattr(pairs_module, "build_pair_table", refuse)
        r = runner.invoke(app, ["mine", f"{s3}/st", *args, "-o", f"{s3}/pairs/", "--stats",
                                str(tmp_path / "dist.json"), "--ray", "local"])
    assert r.exit_code == 0, r.output
    got, want = read_table(f"{s3}/pairs/"), pd.read_parquet(tmp_path / "p.parquet")
    assert (got["store_id"] == Store.open(f"{s3}/st").content_id).all()
    pd.testing.assert_frame_equal(got.drop(columns="store_id"), want.drop(columns="store_id"))
    assert rules == ("positive_kind" in got and (got["positive_kind"] == "mined").any())
    sa, sb = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("local", "dist"))
    # the positives' scores are computed where the blocks run: float32 sums in another order
    assert sb.pop("pos_score") == pytest.approx(sa.pop("pos_score"), abs=1e-5)
    skip = {"seconds", "ray", "store", "store_id", "index"}
    assert {k: v for k, v in sa.items() if k not in skip} == \
        {k: v for k, v in sb.items() if k not in skip}
    assert (case == "split") == ("its lists in 2 partitions" in sb["index"])
    assert (case == "rules-split") == ("whitened_lists" in sb["seconds"])
    parts = json.loads(read_bytes(f"{s3}/pairs/_pairkit_parts.json"))["parts"]
    assert sorted(list_names(f"{s3}/pairs")) == sorted(
        [p["file"] for p in parts] + ["_pairkit_parts.json"])
    r = runner.invoke(app, ["mine", f"{s3}/st", *args, "-o", f"{s3}/pairs/", "--ray", "local"])
    assert r.exit_code == 1 and "exists; pass --force" in r.output
    if case != "plain":
        return
    # another run commits to the output between this run's start and its commit: this
    # run's commit is refused, and every object it put is removed
    import pairkit.core.remote_parts as remote_parts

    real = remote_parts.put_if

    def racing(url, data, tag):
        real(url, json.dumps({"format": "pairkit-parts", "parts": parts}).encode(), tag)
        return real(url, data, tag)

    before = sorted(list_names(f"{s3}/pairs"))
    with monkeypatch.context() as m:
        m.setattr(remote_parts, "put_if", racing)
        r = runner.invoke(app, ["mine", f"{s3}/st", *args, "-o", f"{s3}/pairs/", "--ray",
                                "local", "--force"])
    assert r.exit_code == 1 and "written meanwhile by another process" in r.output, r.output
    assert sorted(list_names(f"{s3}/pairs")) == before


def _plus_one(shared, block):
    return shared + block


def test_a_pool_on_a_busy_cluster_says_why_it_waits(cluster, monkeypatch, capsys):
    """Found by a bug hunt (2026-12-06): with every CPU of the cluster held by another
    job, ``--ray`` waited without a word (Ray's normal behaviour). After WAIT_NOTE_S
    without a worker placed, one line on stderr says so, and the run goes on when the
    CPUs free up."""
    import threading

    from pairkit.distributed import pool as pool_module

    monkeypatch.setattr(pool_module, "WAIT_NOTE_S", 1.0)

    @ray.remote(num_cpus=2)
    class Hog:
        def ready(self):
            return True

    hog = Hog.remote()
    ray.get(hog.ready.remote())  # both CPUs held
    threading.Timer(4.0, lambda: ray.kill(hog)).start()
    got = list(pool_module.BlockPool(_plus_one, cluster, "a test block").map(10, [1, 2, 3]))
    assert got == [11, 12, 13]
    err = capsys.readouterr().err
    assert err.count("waiting for the Ray cluster") == 1, err
    assert "no worker has started in 1 s" in err and "0 of 2 CPUs are free" in err


@pytest.mark.parametrize("how", ["partitions", "tiles"])
def test_dedup_on_ray_reports_progress_as_here(tmp_path, cluster, monkeypatch, how):
    """fix-small: ``dedup --ray`` took the progress hook and dropped it (no bar on a
    terminal, unlike ``dedup`` on one machine). The hook is called as here:
    ``on_start(sources)`` once, then ``progress(m)`` adding up to it, by partitions and by
    tiles; the table is the one without a hook."""
    from pairkit.distributed.dedup import RayPairs
    from pairkit.mine.dedup import DedupConfig, run_dedup

    st = planted_dups(tmp_path, str(tmp_path / "st"))
    cfg = DedupConfig(threshold=0.9, keep="first", batch_size=64)
    starts: list[int] = []
    steps: list[int] = []
    here_starts: list[int] = []
    want, _ = run_dedup(str(st.root), cfg, on_start=here_starts.append,
                        progress=lambda m: None)
    if how == "partitions":
        monkeypatch.setattr("pairkit.index.partitioned_range.WORK_GAIN", 0.0)
    got, summary = run_dedup(str(st.root), cfg, pairs=RayPairs("local", rows_per_part=25),
                             on_start=starts.append, progress=steps.append)
    pd.testing.assert_frame_equal(got, want)
    assert ("searched by partitions" in summary["ray"]) == (how == "partitions")
    assert starts == here_starts == [200]
    assert sum(steps) == 200 and len(steps) > 1 and min(steps) >= 0


def test_ray_pairs_of_arrays_report_each_block(cluster):
    """RayPairs given arrays (blocks of queries shipped to the workers): ``on_start(n)``,
    then each block's rows as it comes back, in order; the pairs are the same."""
    from pairkit.distributed.dedup import RayPairs

    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    starts: list[int] = []
    steps: list[int] = []
    search = RayPairs("local", blocks_per_worker=3)
    said = list(search(x, x.copy(), 0.8, batch_size=64, on_start=starts.append,
                       progress=steps.append))
    plain = list(search(x, x.copy(), 0.8, batch_size=64))
    assert starts == [300] and sum(steps) == 300 and len(steps) == len(said) > 1
    for a, b in zip(said, plain, strict=True):
        for u, v in zip(a, b, strict=True):
            np.testing.assert_array_equal(u, v)
