"""Benchmark: peak memory (RSS) of a whole ``pairkit mine`` process against the store size.

Stores of N x 128 float16 rows (clustered random unit vectors, two views per source,
written shard by shard so generating them needs little memory) are mined with
``pairkit mine STORE --hard -k 5 --index ivf -o pairs.parquet`` (and, with ``--ray``,
``--ray local``); each run is a child process whose peak RSS is read from the kernel
(``os.wait4``: ``ru_maxrss``, the largest resident set of that process and of the
descendants it waited for: with ``--ray local`` possibly Ray's head processes, gcs and
raylet with its object store, which the driver starts and stops) and, as
``driver_hwm_gb``, the child's own peak (``VmHWM``: the driver alone);
``stats_seconds``, the seconds the run's ``--stats`` gives (setup, the false-negative
context, ``whitened_lists``: the split search of the rules' whitened neighbour lists on
the workers); with ``--ray``, ``workers_gb``: per Ray worker process (command line
``ray::...``), its peak (``VmHWM``, which counts the shards' pages read through the
memory map), the largest ``RssAnon`` seen (what it holds itself) and what it last ran,
sampled from /proc every 0.2 s while the run lasts. The table is
checked to have 5 negatives per anchor (``--rules``: ``--filter-false-negatives``, the
default rules and mined positives, at least 99% of them).

Each run also records where the memory goes (``--stages``, on by default): the child wraps
the steps of ``mine`` (reading the item table, ``Store.vectors``, building the index
``open_searcher``, ``mine_negatives``, ``build_pair_table``, ``write_table``) and reports
its RSS after each step and the peak within it (a 20 ms sampler of /proc/self/status), so
the growth per row can be put on the structures that hold it; with ``--rules`` also the
false-negative context's steps (the whitened neighbour lists, the mutual test, the
spectral embedding and cluster runs, the near-duplicate groups, the masked index, the
mined positives, the label-free estimate). ``mine --ray`` to a parquet
output takes the path where the workers write the table (pairkit/mine/parts_run.py): its
steps are the whole run (``mine_parts``) and the commit of the parts (``commit_parts``);
the plan is made by a Ray task, not in this process.

Local ``mine`` to a parquet output is streamed from the store's shards by default (issue 22:
pairkit/mine/parts_run.py run here, the index built from the rows read in place); mode
``memory`` runs the same command the way it ran before, in memory (the store's float32
copy, the whole table), by turning the streamed path off in the child. ``--watch S``
prints the child's ``VmHWM`` and the parts written every S seconds (for runs too long to
wait for: the peak so far and the blocks done).

Goal (issue 22): driver peak RSS of ``mine --ray`` flat (within 1.3x) from 1M to 8M rows;
single-machine ``mine`` of 8M x 128 float16 under 3 GB. Run the sizes your machine allows
and report the figures with the machine, date and load (docs/benchmarks.md).

    .venv/bin/python tests/benchmarks/mine_memory.py --rows 125000 250000 500000 [--ray]
    .venv/bin/python tests/benchmarks/mine_memory.py --rows 250000 1000000 --only-ray \
        --store-dir /tmp/stores --out ray.json
    .venv/bin/python tests/benchmarks/mine_memory.py --rows 1000000 --modes streamed memory \
        --store-dir /tmp/stores --out local.json
    .venv/bin/python tests/benchmarks/mine_memory.py --rows 200000 1000000 --modes memory ray \
        --rules --store-dir /tmp/stores --out rules.json
    .venv/bin/python tests/benchmarks/mine_memory.py --rows 1000000 4000000 \
        --modes ray ray-whole --store-dir /tmp/stores --out split.json   # the split lists
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.s3server

REPO = Path(__file__).resolve().parents[2]
DIM = 128


def make_store(path: Path, rows: int, seed: int = 0, shard: int = 1 << 16) -> None:
    """``rows`` float16 rows (two views per source, 1,000 clusters), shard by shard."""
    import numpy as np
    import pandas as pd

    from pairkit.core.store_writer import StoreWriter, prepare_store_dir

    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(1000, DIM)).astype(np.float32)
    prepare_store_dir(path, force=True)
    with StoreWriter.create(path, DIM, "float16", {"name": "random"}, {"views": 2},
                            commit=False) as writer:
        for start in range(0, rows, shard):
            n = min(shard, rows - start)
            ids = np.arange(start, start + n)
            source = ids // 2
            first = np.flatnonzero(np.r_[True, source[1:] != source[:-1]])
            base = centers[source[first] % 1000] + 0.6 * rng.normal(
                size=(len(first), DIM)).astype(np.float32)
            base = base[np.cumsum(np.r_[True, source[1:] != source[:-1]]) - 1]
            x = base + 0.05 * rng.normal(size=(n, DIM)).astype(np.float32)
            items = pd.DataFrame({"path": [f"s{s}.jpg" for s in source],
                                  "view": (ids % 2).astype(np.int16)})
            writer.add_shard(x, items)
        writer.commit()


STAGES = (("pairkit.core.store", "Store.vectors", "vectors"),
          ("pairkit.index.open", "open_searcher", "index"),
          ("pairkit.mine.hard_negatives", "mine_negatives", "mine"),
          ("pairkit.core.pairs", "build_pair_table", "table"),
          ("pairkit.core.tables", "write_table", "write"),
          # the path where the blocks write the table (mine --ray to parquet): the whole
          # run, its plan (relation, positive sets) and the commit of the parts
          ("pairkit.mine.parts_run", "mine_parts", "parts run"),
          ("pairkit.mine.hard_negatives", "plan_blocks", "plan"),
          ("pairkit.core.table_parts", "commit_parts", "commit"),
          # with --rules: the false-negative context and the mined positives, step by step
          ("pairkit.mine.rules_run", "rules_context", "rules context"),
          ("pairkit.mine.rules_run", "positive_neighbour_lists", "whitened lists"),
          ("pairkit.mine.positives", "mutual_neighbours", "mutual"),
          ("pairkit.mine.spectral", "spectral_embedding", "spectral"),
          ("pairkit.mine.spectral", "cluster_runs", "cluster runs"),
          ("pairkit.mine.rules.near_duplicate", "prepare", "near-duplicate groups"),
          ("pairkit.index.outside", "outside_searcher", "masked index"),
          ("pairkit.mine.rules_run", "mined_positives", "mined positives"),
          ("pairkit.mine.fn_estimate", "estimate_quality", "estimate"))


def status_gb(pid: int | str, *keys: str) -> dict[str, float]:
    """The fields ``keys`` (``VmRSS``, ``VmHWM``, ``RssAnon``: kB in the kernel's table)
    of /proc/PID/status in GB; OSError when the process is gone."""
    with open(f"/proc/{pid}/status") as fh:
        return {line.split(":")[0]: int(line.split()[1]) / 1e6 for line in fh
                if line.startswith(keys)}


def rss_gb() -> float:
    return status_gb("self", "VmRSS").get("VmRSS", 0.0)


def vm_hwm_gb() -> float:
    """This process's own peak resident set (VmHWM), in GB: unlike ``ru_maxrss`` from
    ``wait4``, not raised by the children it waited for (with ``--ray local``: Ray's head
    processes, whose object store holds the plan and the blocks' results)."""
    return status_gb("self", "VmHWM").get("VmHWM", 0.0)


def run_with_stages(argv: list[str]) -> None:
    """Child: ``pairkit ARGV`` with each step of STAGES (and the item table's first read)
    wrapped; prints one JSON line ``{"stages": [[step, rss after, peak within], ...]}``
    on stderr at the end."""
    import functools
    import importlib
    import threading

    peak = [0.0]
    log: list[tuple[str, float, float]] = []

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], rss_gb())
            time.sleep(0.02)

    threading.Thread(target=sample, daemon=True).start()

    def mark(name: str) -> None:
        now = rss_gb()
        log.append((name, round(now, 3), round(max(peak[0], now), 3)))
        peak[0] = now

    def wrapped(fn, name):  # type: ignore[no-untyped-def]
        @functools.wraps(fn)
        def inner(*a, **k):  # type: ignore[no-untyped-def]
            mark(f"before {name}")
            try:
                return fn(*a, **k)
            finally:
                mark(name)
        return inner

    for module, attr, name in STAGES:
        mod = importlib.import_module(module)
        owner, _, leaf = attr.rpartition(".")
        target = getattr(mod, owner) if owner else mod
        setattr(target, leaf, wrapped(getattr(target, leaf), name))
    from pairkit.core.store import Store

    items = Store.items.fget

    def first_items(self):  # type: ignore[no-untyped-def]
        if self._items is not None:
            return items(self)
        mark("before items")
        try:
            return items(self)
        finally:
            mark("items")

    Store.items = property(first_items)  # type: ignore[method-assign,assignment]
    if os.environ.get("MINE_MEMORY_IN_MEMORY") == "1":  # mode "memory": as before issue 22
        import pairkit.mine.parts_run as parts_run

        original = parts_run.streams_parts

        def not_here(output, fn_config, positives, executor=None, index=None):  # type: ignore[no-untyped-def]
            return executor is not None and original(output, fn_config, positives, executor,
                                                      index)

        parts_run.streams_parts = not_here
    if os.environ.get("MINE_MEMORY_WHOLE_LISTS") == "1":  # mode "ray-whole": each worker
        import pairkit.mine.ivf_parts as ivf_parts  # builds the whole index (as before)

        ivf_parts.lists_spec = lambda n, dim, options: None
    from pairkit.cli.main import app

    mark("start")
    code = 0
    try:
        app(argv, standalone_mode=False)
    except SystemExit as exc:
        code = int(exc.code or 0)
    mark("end")
    print(json.dumps({"stages": log, "hwm_gb": vm_hwm_gb()}), file=sys.stderr)
    sys.exit(code)


def watch(pid: int, every: float, out: Path, stop: Any) -> None:
    """Every ``every`` s until ``stop`` is set: the child's VmHWM / VmRSS (GB) and the
    parts its run has written (beside ``out``), one JSON line on stdout."""
    t0 = time.perf_counter()
    while not stop.wait(every):
        try:
            vm = status_gb(pid, "VmHWM", "VmRSS")
        except OSError:
            return
        parts = sum(len(list(d.glob("part-*.parquet")))
                    for d in out.parent.glob(f".{out.name}.*.tmp"))
        print(json.dumps({"elapsed_s": round(time.perf_counter() - t0), "hwm_gb": vm.get("VmHWM"),
                          "rss_gb": vm.get("VmRSS"), "parts": parts,
                          "load": os.getloadavg()[0]}), flush=True)


def descendants(root: int) -> set[int]:
    """The processes below ``root`` (its children, theirs, ...), from /proc."""
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as fh:
                    # the command name is in parentheses and may hold spaces
                    parent[int(entry.name)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    below: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - below
        below |= frontier
    return below


def ray_workers_hwm(peaks: dict[int, tuple[float, float, str]], root: int) -> None:
    """Record into ``peaks`` (pid -> (VmHWM GB, largest RssAnon GB seen, what it ran)) the
    peak of every Ray worker process alive now (its command line starts with ``ray::``:
    the workers and actors, not gcs or the raylet) and the last task or actor its title
    named (``ray::IDLE`` between tasks). VmHWM is the process's own peak, so a sample
    before it exits catches it; it counts the store's shards' pages a worker has read
    through its memory map (file pages, shared with the page cache), which RssAnon (the
    memory the process itself holds: its index, its arrays) leaves out. Only the
    processes below ``root`` (the run's own Ray, not another on the machine)."""
    for pid in sorted(descendants(root)):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                title = fh.read(200).split(b"\0")[0].decode(errors="replace")
            if not title.startswith("ray::"):
                continue
            vm = status_gb(pid, "VmHWM", "RssAnon")
            hwm, anon, seen = peaks.get(pid, (0.0, 0.0, "IDLE"))
            name = title[5:].split(" ")[0]
            peaks[pid] = (max(hwm, vm.get("VmHWM", 0.0)), max(anon, vm.get("RssAnon", 0.0)),
                          seen if name == "IDLE" else name)
        except OSError:
            continue


def peak_rss(cmd: list[str], env_extra: dict[str, str] | None = None,
             watch_every: float | None = None, out: Path | None = None,
             workers: dict[int, tuple[float, float, str]] | None = None
             ) -> tuple[float, float, int, list, float | None]:
    """(peak RSS in GB, seconds, exit code, stages, the child's own VmHWM in GB) of one
    child process. The peak is ``ru_maxrss`` from ``wait4``: the largest of the child and
    the descendants it waited for. ``workers``: filled with the peak (VmHWM, GB) of each
    Ray worker process seen while the child ran (sampled every 0.2 s)."""
    import threading

    env = dict(os.environ, PYTHONPATH=str(REPO), **(env_extra or {}))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    stop = threading.Event()
    if watch_every and out is not None:
        threading.Thread(target=watch, args=(proc.pid, watch_every, out, stop),
                         daemon=True).start()
    if workers is not None:
        def sample_workers() -> None:
            while not stop.wait(0.2):
                ray_workers_hwm(workers, proc.pid)

        threading.Thread(target=sample_workers, daemon=True).start()
    err_bytes = proc.stderr.read() if proc.stderr else b""
    stop.set()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    err = err_bytes.decode()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(err, file=sys.stderr)
    stages, hwm = [], None
    for line in err.splitlines():
        if line.startswith('{"stages"'):
            stages, hwm = json.loads(line)["stages"], json.loads(line).get("hwm_gb")
    return usage.ru_maxrss / 1e6, seconds, code, stages, hwm  # ru_maxrss is in KiB on Linux


def growth(stages: list) -> dict[str, float]:
    """GB each step added to the RSS (after minus before) and its peak above the start."""
    out: dict[str, float] = {}
    before: dict[str, float] = {}
    for name, now, top in stages:
        if name.startswith("before "):
            before[name[7:]] = now
        elif name in before:
            out[name] = round(now - before[name], 3)
            out[name + "_peak"] = round(top - before[name], 3)
    return out


class S3Bench:
    """A local S3 server (tests/s3server.py) for the ``ray-s3`` mode: a bucket, the
    stores uploaded to it object by object (the manifest last), the children's env."""

    bucket = "s3://pairkit-bench"

    def __enter__(self) -> S3Bench:
        from tests.s3server import ENV, moto_server

        self.server = moto_server()
        endpoint = self.server.__enter__()
        if endpoint is None:
            raise SystemExit("ray-s3: moto_server and s3fs are needed (the dev extra)")
        self.env = {**ENV, "AWS_ENDPOINT_URL": endpoint}
        os.environ.update(self.env)  # this process reads the tables back
        import s3fs

        self.fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})
        self.fs.mkdir(self.bucket[len("s3://"):])
        return self

    def upload(self, store: Path) -> str:
        url = f"{self.bucket}/{store.name}"
        files = sorted(p for p in store.iterdir() if p.is_file() and p.name != "manifest.json"
                       and not p.name.startswith("."))
        for f in [*files, store / "manifest.json"]:
            self.fs.put_file(str(f), f"{url[len('s3://'):]}/{f.name}")
        return url

    def __exit__(self, *exc: Any) -> None:
        self.server.__exit__(*exc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[125_000, 250_000, 500_000])
    parser.add_argument("--ray", action="store_true", help="also mine with --ray local")
    parser.add_argument("--only-ray", action="store_true", help="mine with --ray local only")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--store-dir", type=Path, help="keep the generated stores here "
                        "(reused when present) instead of a temp dir")
    parser.add_argument("--modes", nargs="+",
                        choices=("streamed", "memory", "ray", "ray-whole", "ray-s3"),
                        help="local streamed (the default path), local in memory (as "
                        "before), --ray local (default: streamed, and ray with --ray); "
                        "ray-whole: --ray local with the IVF lists not split (each worker "
                        "builds the whole index, as before the split); "
                        "ray-s3: --ray local with the store and the output on a local S3 "
                        "server (moto_server, started here; the store uploaded to it)")
    parser.add_argument("--nprobe", type=int, help="pass --nprobe (default: mine's)")
    parser.add_argument("--watch", type=float, help="print the child's peak every S s")
    parser.add_argument("--rules", action="store_true", help="mine with "
                        "--filter-false-negatives (the default rules and mined positives)")
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        run_with_stages(sys.argv[2:])
    args = parser.parse_args()
    import pandas as pd

    results = []
    s3 = S3Bench() if "ray-s3" in (args.modes or []) else None
    with tempfile.TemporaryDirectory(prefix="pairkit-mem-") as tmp, \
            (s3 if s3 is not None else contextlib.nullcontext()):
        for rows in args.rows:
            store = (args.store_dir or Path(tmp)) / f"st{rows}"
            t0 = time.perf_counter()
            if not (store / "manifest.json").exists():
                make_store(store, rows)
            made = time.perf_counter() - t0
            chosen = args.modes or (["ray"] if args.only_ray else
                                    ["streamed", "ray"] if args.ray else ["streamed"])
            runs = {"streamed": ("local", [], {}),
                    "memory": ("local in memory", [], {"MINE_MEMORY_IN_MEMORY": "1"}),
                    "ray": ("ray local", ["--ray", "local"], {}),
                    "ray-whole": ("ray local, lists not split", ["--ray", "local"],
                                  {"MINE_MEMORY_WHOLE_LISTS": "1"}),
                    "ray-s3": ("ray local, s3:// store and output", ["--ray", "local"], {})}
            for mode in chosen:
                name, extra, env_extra = runs[mode]
                out: Any = Path(tmp) / f"p{rows}.parquet"
                where: Any = store
                if mode == "ray-s3":
                    assert s3 is not None
                    where, out = s3.upload(store), f"{s3.bucket}/p{rows}/"
                    env_extra = s3.env
                if args.nprobe:
                    extra = [*extra, "--nprobe", str(args.nprobe)]
                if args.rules:
                    extra = [*extra, "--filter-false-negatives"]
                stats_file = Path(tmp) / f"stats{rows}-{mode}.json"
                cmd = [sys.executable, __file__, "--child", "mine", str(where), "--hard",
                       "-k", "5", "--index", "ivf", "-o", str(out), "--force", "-q",
                       "--stats", str(stats_file), *extra]
                workers: dict[int, tuple[float, float, str]] = {}
                gb, seconds, code, stages, hwm = peak_rss(
                    cmd, env_extra, args.watch, out,
                    workers if mode.startswith("ray") else None)
                negatives = 0
                if code == 0 and mode == "ray-s3":
                    from pairkit.core.tables import read_table

                    negatives = int((read_table(out)["negative_id"] >= 0).sum())
                elif code == 0:
                    negatives = int((pd.read_parquet(out, columns=["negative_id"])[
                        "negative_id"] >= 0).sum())
                # the rules may leave an anchor short; without them each has its 5
                ok = code == 0 and (negatives >= 0.99 * 5 * rows if args.rules
                                    else negatives == 5 * rows)
                row = {"rows": rows, "mode": name, "peak_rss_gb": round(gb, 3),
                       "driver_hwm_gb": hwm,
                       # each Ray worker process's own peak (VmHWM), its largest
                       # RssAnon sampled and what it last ran, largest first
                       "workers_gb": sorted(([round(hwm, 3), round(anon, 3), name]
                                             for hwm, anon, name in workers.values()),
                                            reverse=True)[:8],
                       "seconds": round(seconds, 1), "ok": ok,
                       "vectors_gb_float16": round(rows * DIM * 2 / 1e9, 3),
                       "store_made_s": round(made, 1), "load": os.getloadavg()[0],
                       "nprobe": args.nprobe, "rules": args.rules, "negatives": negatives,
                       # the run's own account of its seconds (setup, the false-negative
                       # context, the whitened lists' split search, the blocks)
                       "stats_seconds": (json.loads(stats_file.read_text()).get("seconds")
                                         if code == 0 and stats_file.exists() else None),
                       "steps_gb": growth(stages), "stages": stages}
                results.append(row)
                print(json.dumps(row), flush=True)
    info = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                       f"{platform.python_version()}",
            "date": time.strftime("%Y-%m-%d"), "results": results}
    if args.out:
        args.out.write_text(json.dumps(info, indent=2) + "\n")


if __name__ == "__main__":
    main()
