"""Benchmark: ``embed --ray`` (plain Ray tasks, one per partition: read, decode, render the
views and encode in one process) against the same work as a **Ray Data** pipeline (issue
22.3): decoding as a ``map_batches`` stage on CPU tasks, encoding as a ``map_batches``
stage on an actor pool that loads the encoder once per actor, blocks streamed back to
the driver in order.

Both run pairkit's own steps, so the rows can be compared bit for bit: the decode stage
calls :class:`pairkit.encode.batches.SourceDataset` (PIL decode, the seeded views, the
encoder's preprocessing) and :func:`~pairkit.encode.batches.collate`; the encode stage
calls :meth:`pairkit.encode.runner.Runner.encode`. The Ray Data run checks its vectors
against the store ``pairkit embed --ray local`` wrote (same images, model, seed, views).
What the Ray Data run does not do (so its time is a lower bound of a full command): the
store writer (shards, item table, manifest), resume, error rows.

Every run is a fresh process with its own local Ray cluster (``ray.init(num_cpus=C)``),
timed from outside (whole process) and inside (the pipeline alone, after ``ray.init``).

    .venv/bin/python tests/benchmarks/ray_data_embed.py --images 2000 --out r.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = "timm/tf_efficientnet_lite0"


def ray_data_child(images: Path, store: Path, views: int, batch: int, cpus: int,
                   encoders: int, seed: int) -> dict:
    """The Ray Data pipeline in this process; checks its rows against ``store``."""
    import logging

    import numpy as np
    import ray

    from pairkit.core.store import Store, l2_normalize
    from pairkit.encode.embedder import find_any_sources

    t0 = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    t_init = time.perf_counter() - t0
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # the store's row order
    ctx.enable_progress_bars = False
    files = sorted(find_any_sources(images).files, key=lambda f: f.path)
    from pairkit.encode.registry import EncoderRequest, load_encoder

    pre = load_encoder(EncoderRequest(MODEL, "none", None, "cpu", seed)).preprocess
    per = max(1, batch // views)

    def decode(rows: dict) -> dict:
        """CPU stage (Ray tasks): decode + views + the encoder's preprocessing."""
        from pairkit.encode.batches import SourceDataset, collate

        ds = SourceDataset(files, views, pre, seed, 64 << 20)
        ok, errors, pixels = collate([ds[int(i)] for i in rows["i"]])
        assert not errors
        return {"i": np.array([i for i, _ in ok]),
                "pixels": pixels.numpy().reshape(len(ok), views, *pixels.shape[1:])}

    class Encode:
        """Actor stage: the encoder loaded once per actor."""

        def __init__(self) -> None:
            from pairkit.core.threads import configure, import_torch
            from pairkit.encode.registry import EncoderRequest, load_encoder
            from pairkit.encode.runner import Runner

            configure(1)
            import_torch()
            enc = load_encoder(EncoderRequest(MODEL, "none", None, "cpu", seed))
            self.runner = Runner(enc, "cpu", "auto")

        def __call__(self, rows: dict) -> dict:
            px = rows["pixels"]
            vec = np.asarray(self.runner.encode(px.reshape(-1, *px.shape[2:])), np.float32)
            return {"i": rows["i"], "vec": vec.reshape(len(px), views, -1)}

    t1 = time.perf_counter()
    # the indices made here (no read tasks: with the encode actors holding CPUs, read
    # tasks waiting for one would stall the pipeline)
    ds = ray.data.from_items([{"i": i} for i in range(len(files))],
                             override_num_blocks=max(1, -(-len(files) // per)))
    ds = ds.map_batches(decode, batch_size=per, num_cpus=1)  # tasks, on the free CPUs
    ds = ds.map_batches(Encode, batch_size=per, concurrency=encoders, num_cpus=1)
    got = []
    for b in ds.iter_batches(batch_size=None, batch_format="numpy"):
        got.append(b["vec"].reshape(-1, b["vec"].shape[-1]))
    vectors = l2_normalize(np.concatenate(got))  # as the store writer stores them
    t_pipe = time.perf_counter() - t1
    ray.shutdown()
    st = Store.open(store)
    ref = st.vectors(np.float32)
    stored = vectors.astype(st.dtype).astype(np.float32)  # the store's precision
    same = stored.shape == ref.shape and bool(np.array_equal(stored, ref))
    return {"init_s": round(t_init, 2), "pipeline_s": round(t_pipe, 2),
            "rows": int(len(vectors)), "same_rows_as_embed_ray": same,
            "max_abs_diff": float(np.abs(stored - ref).max()) if stored.shape == ref.shape
            else None}


def timed(cmd: list[str]) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0, r.stdout + r.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--size", type=int, default=128, help="image side, pixels")
    ap.add_argument("--views", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128, help="rows (views) per batch")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--encoders", type=int, default=1, help="Ray Data encode actors")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", nargs=2, metavar=("IMAGES", "STORE"))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(ray_data_child(Path(args.child[0]), Path(args.child[1]), args.views,
                                        args.batch, args.cpus, args.encoders, 0)))
        return
    sys.path.insert(0, str(REPO / "tests" / "benchmarks"))
    from embed_throughput import make_jpegs

    work = Path(tempfile.mkdtemp(prefix="raydata-"))
    images = work / "images"
    make_jpegs(images, args.images, (args.size, args.size))
    common = ["--model", MODEL, "--pretrained", "none", "--views", str(args.views),
              "--batch-size", str(args.batch), "--seed", "0", "-q", "--force"]
    runs = []
    for r in range(args.rounds):
        store = work / f"store{r}"
        s_tasks, _ = timed([sys.executable, "-m", "pairkit", "embed", str(images), "-o",
                            str(store), *common, "--ray", "local"])
        s_local, _ = timed([sys.executable, "-m", "pairkit", "embed", str(images), "-o",
                            str(work / f"local{r}"), *common])
        s_data, out = timed([sys.executable, __file__, "--child", str(images), str(store),
                             "--views", str(args.views), "--batch", str(args.batch),
                             "--cpus", str(args.cpus), "--encoders", str(args.encoders)])
        inner = json.loads([ln for ln in out.splitlines() if ln.startswith("{\"init_s")][-1])
        runs.append({"round": r, "embed_ray_tasks_s": round(s_tasks, 2),
                     "embed_local_s": round(s_local, 2), "ray_data_s": round(s_data, 2),
                     **{f"ray_data_{k}": v for k, v in inner.items()},
                     "load": os.getloadavg()[0]})
        print(json.dumps(runs[-1]), flush=True)
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "python": platform.python_version(), "images": args.images, "size": args.size,
              "views": args.views, "batch": args.batch, "cpus": args.cpus,
              "encoders": args.encoders, "model": MODEL, "runs": runs}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
