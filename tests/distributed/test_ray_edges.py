"""The edges of ``--ray`` found by a bug hunt (2026-12-06), checked without a cluster:
the threads of a worker fit the largest node, an unreachable address is refused within
seconds, Ray's printed worker errors stay off stdout (where tables and JSON go), embed's
paths are absolute before they reach a worker, an empty ``--ray`` is bad usage and a GPU
``--device`` is judged where it runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.distributed import check_reachable, worker_threads
from pairkit.errors import PairkitError
from tests.conftest import random_store

runner = CliRunner()


def test_a_worker_fits_the_largest_node() -> None:
    # two nodes of one CPU: --threads 2 asked Ray for 2-CPU workers no node could place
    assert worker_threads(2, [1, 1]) == 1
    assert worker_threads(4, [2, 8]) == 4
    assert worker_threads(16, [2, 8]) == 8
    assert worker_threads(1, [0]) == 1


def test_an_unreachable_address_is_refused_at_once() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    with pytest.raises(PairkitError, match=f"can't reach the Ray cluster at 127.0.0.1:{port}"):
        check_reachable(f"127.0.0.1:{port}", timeout=5)
    assert time.perf_counter() - t0 < 5
    for address in ("local", "auto", "ray://head:10001"):
        check_reachable(address)  # left to Ray


def serve_once(reply: bytes | None) -> tuple[int, threading.Thread]:
    """A TCP server on a free port that accepts one connection and sends ``reply`` (None:
    says nothing, holds the connection 3 s); returns the port and its thread."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def answer() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                if reply is None:
                    time.sleep(3)
                else:
                    conn.recv(1024)
                    conn.sendall(reply)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return server.getsockname()[1], thread


def test_an_address_that_answers_but_is_no_ray_cluster_is_refused(monkeypatch) -> None:
    """Found by the pipes-and-Ray hunt (2026-12-07): a HOST:PORT that accepts connections
    but is no Ray cluster (the dashboard's port 8265, a web server) passed the check, and
    ray.init then retried for about 14 minutes, printing C++ warnings every few seconds.
    A Ray cluster's address is its GCS, a gRPC server: it answers HTTP/2's connection
    preface with a SETTINGS frame at once."""
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    port, thread = serve_once(b"HTTP/1.0 400 Bad Request\r\n\r\n")  # a web server
    with pytest.raises(PairkitError, match=(
            f"^can't reach the Ray cluster at 127.0.0.1:{port}: it answers, but not as a Ray "
            r"cluster \(no gRPC\); give the head's GCS port \(ray start --head --port, 6379 "
            r"by default\), not the dashboard's \(8265\)$")):
        check_reachable(f"127.0.0.1:{port}", timeout=5)
    thread.join()
    port, thread = serve_once(None)  # accepts, never answers: refused after the timeout
    t0 = time.perf_counter()
    with pytest.raises(PairkitError, match="it answers, but not as a Ray cluster"):
        check_reachable(f"127.0.0.1:{port}", timeout=1)
    assert time.perf_counter() - t0 < 2.5
    thread.join()
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # a gRPC server's first frame
    port, thread = serve_once(settings)
    check_reachable(f"127.0.0.1:{port}", timeout=5)  # passed on to Ray
    thread.join()
    monkeypatch.setenv("RAY_USE_TLS", "1")  # a TLS cluster answers in TLS: left to Ray
    port, thread = serve_once(b"HTTP/1.0 400 Bad Request\r\n\r\n")
    check_reachable(f"127.0.0.1:{port}", timeout=5)
    thread.join()


def test_an_address_without_a_host_is_refused_in_one_line(tmp_path: Path) -> None:
    """Found by the pipes-and-Ray hunt (2026-12-07): ``--ray :6379`` (an unset variable in
    ``--ray "$HEAD:6379"``) printed Ray's logged traceback ("Failed to convert :6379 to
    host:port ... ValueError: Malformed host") above pairkit's line."""
    with pytest.raises(PairkitError, match="^can't reach the Ray cluster at :6379: no host "
                       "before the port$"):
        check_reachable(":6379")
    pytest.importorskip("ray")
    store = random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-k", "2", "--ray", ":6379"])
    assert r.exit_code == 1, r.output
    assert r.output == "error: can't reach the Ray cluster at :6379: no host before the port\n"


def test_an_unreachable_address_from_the_environment_says_where_it_came_from(tmp_path: Path
                                                                            ) -> None:
    """Found by the pipes-and-Ray hunt (2026-12-07): with PAIRKIT_RAY_ADDRESS left set, a
    plain ``pairkit mine`` failed with "can't reach the Ray cluster at ...", naming no
    option or variable the user had given this time (the GPU refusal already named it)."""
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-k", "2", "-q"],
                      env={"PAIRKIT_RAY_ADDRESS": f"127.0.0.1:{port}"})
    assert r.exit_code == 1, r.output
    assert r.output == (f"error: can't reach the Ray cluster at 127.0.0.1:{port}: Connection "
                        "refused (PAIRKIT_RAY_ADDRESS is set: it gives --ray when not typed)\n")


def test_rays_printed_worker_errors_go_to_stderr(monkeypatch, capsys) -> None:
    ray_worker = pytest.importorskip("ray._private.worker")
    from pairkit.distributed import keep_prints_off_stdout

    monkeypatch.setattr(ray_worker, "print_to_stdstream", ray_worker.print_to_stdstream)
    keep_prints_off_stdout()
    keep_prints_off_stdout()  # once is enough: not wrapped twice
    ray_worker.print_to_stdstream({"lines": ["A worker died or was killed"], "pid": "raylet",
                                   "is_err": False}, ignore_prefix=False)
    out, err = capsys.readouterr()
    assert out == "" and "A worker died or was killed" in err


def test_embed_ships_absolute_paths(tmp_path: Path, monkeypatch) -> None:
    from pairkit.distributed.embed import for_workers
    from pairkit.encode.config import EmbedConfig
    from pairkit.encode.images import ImageFile

    monkeypatch.chdir(tmp_path)
    cfg = EmbedConfig(images=Path("images"), store=Path("relstore"))
    shipped, files = for_workers(cfg, [ImageFile("a/b.png", Path("images/a/b.png"))])
    assert shipped.store == tmp_path / "relstore"
    assert files[0].abs_path == tmp_path / "images" / "a" / "b.png"
    assert files[0].path == "a/b.png"
    url = EmbedConfig(images=Path("images"), store="s3://bucket/store")  # type: ignore[arg-type]
    assert for_workers(url, [])[0].store == "s3://bucket/store"


def test_empty_ray_address_and_gpu_device_checks(tmp_path: Path) -> None:
    store = random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-o", "-", "--ray", ""])
    assert r.exit_code == 2 and "--ray needs an address" in r.output, r.output
    # (an empty PAIRKIT_RAY_ADDRESS is unset, as Click reads every empty variable)
    # with --ray the search runs on the workers: a GPU device is bad usage (exit 2), not
    # "no CUDA GPU is visible" from this machine (exit 1)
    r = runner.invoke(app, ["dedup", str(store.root), "--ray", "local", "--device", "cuda",
                            "-o", str(tmp_path / "d.csv")], env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.exit_code == 2 and "searches on the workers' CPUs" in r.output, r.output
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "--device", "cuda", "-o",
                            str(tmp_path / "m.csv")], env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.exit_code == 1 and "no CUDA GPU is visible" in r.output, r.output


def test_dedup_says_when_the_cluster_is_not_used(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): with the pixels method (the default for a store
    whose images can be read) or --exact-only, `dedup --ray` ran wholly here and said
    nothing, an unreachable address included."""
    from tests.conftest import make_images

    make_images(tmp_path / "img", n_per_class=4, classes=2)
    r = runner.invoke(app, ["embed", str(tmp_path / "img"), "-o", str(tmp_path / "s"),
                            "--model", "pixels", "-q"])
    assert r.exit_code == 0, r.output
    for extra in ([], ["--exact-only"]):
        r = runner.invoke(app, ["dedup", str(tmp_path / "s"), "--ray", "127.0.0.1:1", "-o",
                                str(tmp_path / "d.csv"), "--force", *extra])
        assert r.exit_code == 0, r.output
        assert "the cluster was not used" in r.output and "search on Ray" not in r.output


def test_dedup_against_runs_here_when_the_address_comes_from_the_environment(tmp_path: Path
                                                                             ) -> None:
    """Found by a bug hunt (2026-12-06): with PAIRKIT_RAY_ADDRESS set, `dedup --against`
    was refused ("drop --ray") though no --ray was typed."""
    a = random_store(tmp_path / "a", n_sources=10, views=2, dim=8)
    b = random_store(tmp_path / "b", n_sources=10, views=2, dim=8, seed=1)
    args = ["dedup", str(a.root), "--against", str(b.root), "-t", "0.9", "-o",
            str(tmp_path / "x.csv")]
    r = runner.invoke(app, args, env={"PAIRKIT_RAY_ADDRESS": "127.0.0.1:1"})
    assert r.exit_code == 0, r.output
    assert "PAIRKIT_RAY_ADDRESS is set; dedup --against runs here" in r.output
    r = runner.invoke(app, [*args, "--force", "--ray", "local"])
    assert r.exit_code == 2 and "drop --ray" in r.output


def test_embed_force_on_an_unreachable_cluster_keeps_the_old_store(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): the old store was cleared before the cluster was
    reached; a bad address left an empty folder."""
    from pairkit.core.store import Store
    from tests.conftest import make_images

    make_images(tmp_path / "img", n_per_class=3, classes=2)
    store = tmp_path / "s"
    r = runner.invoke(app, ["embed", str(tmp_path / "img"), "-o", str(store), "--model",
                            "pixels", "-q"])
    assert r.exit_code == 0, r.output
    before = Store.open(store).content_id
    r = runner.invoke(app, ["embed", str(tmp_path / "img"), "-o", str(store), "--model",
                            "pixels", "--views", "2", "--force", "--ray", "127.0.0.1:1"])
    assert r.exit_code == 1 and "can't reach the Ray cluster" in r.output
    assert Store.open(store).content_id == before


def test_eval_says_when_the_cluster_is_not_used(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): `eval --ray` never said whether it ran on the
    cluster; without a search (the linear probe only) it was not used, without a word."""
    store = random_store(tmp_path / "s", n_sources=30, views=2, dim=8)
    r = runner.invoke(app, ["eval", str(store.root), "--metrics", "linear", "--ray",
                            "127.0.0.1:1"])
    assert r.exit_code == 0, r.output
    assert "the cluster was not used" in r.output


def test_a_refusal_names_the_variable_that_set_the_address(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): with PAIRKIT_RAY_ADDRESS set, the GPU refusal
    spoke of --ray, an option the user never typed."""
    store = random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "--device", "cuda", "-o",
                            str(tmp_path / "m.csv")], env={"PAIRKIT_RAY_ADDRESS": "local"})
    assert r.exit_code == 2 and "PAIRKIT_RAY_ADDRESS is set" in r.output, r.output


def test_a_shard_answers_with_global_ids_and_keeps_the_padding() -> None:
    """Mutation audit 5a: a shard's ids are its rows' global ids (its start added), and
    a place it can't fill (k above its rows) stays -1/-inf, so the driver's merge of the
    shards (score, then id) is the single exact search's list. Checked without Ray: the
    worker's index is set as a first search would set it."""
    import numpy as np

    from pairkit.distributed.search import ShardWorker
    from pairkit.index.open import exact_searcher

    rows = np.array([[1, 0], [0, 1], [0.6, 0.8]], np.float32)  # global rows 10, 11, 12
    worker = ShardWorker.__new__(ShardWorker)
    worker.crash, worker.index = None, exact_searcher(rows).index
    queries = np.array([[1, 0], [0, 1]], np.float32)
    scores, ids = worker.search([], 10, queries, 4)
    assert ids.tolist() == [[10, 12, 11, -1], [11, 12, 10, -1]]
    np.testing.assert_allclose(scores[:, :3], [[1.0, 0.6, 0.0], [1.0, 0.8, 0.0]], atol=1e-6)
    assert np.isneginf(scores[:, 3]).all()


def test_the_dedup_summary_counts_blocks_and_tiles() -> None:
    """Mutation audit 5a: ``R`` blocks make ``R (R + 1) / 2`` tiles (the upper triangle),
    and the widest block is named. 10 rows, 6 tasks, blocks of at least 2 rows: 3 blocks
    (3 * 4 / 2 = 6 tiles >= 6 tasks) of 4, 4 and 2 rows; 3 rows under a 4096-row minimum:
    one block, one tile."""
    from pairkit.distributed.dedup import tiles_line

    assert tiles_line(10, 4, 6, 2) == "3 blocks of at most 4 sources, 6 tiles"
    assert tiles_line(3, 4, 6, 4096) == "1 block of at most 3 sources, 1 tile"
    assert tiles_line(0, 4, 6, 2) == "0 blocks of at most 0 sources, 0 tiles"


def test_mine_on_ray_fits_the_index_to_the_workers_cpus() -> None:
    """Mutation audit 5a: ``mine --ray`` with ``--device auto`` searches on the workers'
    CPUs with FAISS: the options the blocks receive say ``cpu`` and ``faiss`` (``auto``
    would let a worker beside a GPU build its own GPU index); a GPU device is refused."""
    from pairkit.distributed.mine import RayMine
    from pairkit.errors import UsageError
    from pairkit.index.options import IndexOptions

    fitted = RayMine("local").search_options(IndexOptions(kind="flat", device="auto"))
    assert (fitted.device, fitted.backend, fitted.kind) == ("cpu", "faiss", "flat")
    with pytest.raises(UsageError, match="mine --ray searches on the workers' CPUs"):
        RayMine("local").search_options(IndexOptions(kind="flat", device="cuda"))


def test_a_block_mapper_counts_the_clusters_workers() -> None:
    """Mutation audit 5a: the mapper reports the cluster's workers (processes at a time,
    CPUs // threads), which sizes the blocks of the parts' passes
    (``pairkit.mine.parts_run``), not its threads; no actor starts without ``warm``."""
    from pairkit.distributed import Cluster
    from pairkit.distributed.pool import BlockMapper

    mapper = BlockMapper(Cluster("local", cpus=12, gpus=0, threads=2), "a block")
    assert mapper.workers == 6 and mapper.pool is None
    assert BlockMapper(Cluster("local", cpus=1, gpus=0, threads=4), "a block").workers == 1
