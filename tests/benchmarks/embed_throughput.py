"""Throughput of `pairkit embed` against the encoder alone and the decoder alone.

    python tests/benchmarks/embed_throughput.py            # CPU, small open_clip model
    python tests/benchmarks/embed_throughput.py --quick
    python tests/benchmarks/embed_throughput.py --device cuda --model openclip/ViT-B-32

All in one run, on the same generated JPEG folder and the same random-weight model:
1. encoder alone: forward passes on pre-made tensors of the same batch size (the ceiling);
2. data pipeline alone: read + decode + resize to uint8 batches, no model, for each
   ``--decode``: ``cpu`` (PIL in DataLoader workers or a thread) and ``gpu`` (the device
   pipeline: reader threads, batched torchvision decode_jpeg, views in torch on --device;
   on a CPU device torchvision's CPU decoder);
3. `pairkit embed` as a subprocess, whole command (startup and model build included), and
   its steady rate from the progress summary.
Prints a markdown table; `--out FILE` writes JSON.

    python tests/benchmarks/embed_throughput.py --compare /work/main [--views 1,4]

Before/after in one run: the device pipeline alone (``--decode gpu`` on ``--device``; on
the CPU torchvision's CPU decoder) and the whole ``pairkit embed --decode gpu`` command,
for this checkout and each ``--compare`` checkout in turn, ``--rounds`` times (best of),
so load changes hit all alike.
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

import numpy as np


def make_jpegs(root: Path, n: int, size: tuple[int, int], seed: int = 0) -> None:
    """Photo-like smooth random JPEGs (quality 90)."""
    from PIL import Image, ImageFilter

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        small = rng.integers(0, 255, (size[1] // 16, size[0] // 16, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize(size, Image.Resampling.BILINEAR)
        img = img.filter(ImageFilter.GaussianBlur(1))
        img.save(root / f"img{i:05d}.jpg", quality=90)


def encoder_alone(model: str, device: str, batch: int, precision: str, seconds: float) -> float:
    import torch

    from pairkit.encode.registry import EncoderRequest, load_encoder
    from pairkit.encode.runner import Runner

    enc = load_encoder(EncoderRequest(model, pretrained="none", device=device))
    runner = Runner(enc, device, precision)
    size = enc.preprocess.size
    pixels = np.random.default_rng(0).integers(0, 255, (batch, 3, size, size), dtype=np.uint8)
    runner(pixels)  # warm-up
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        runner(pixels)
        done += batch
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return done / (time.perf_counter() - t0)


def device_pipeline_alone(folder: Path, model: str, batch: int, device: str) -> float:
    """The --decode gpu pipeline alone on ``device`` (default reader threads)."""
    from pairkit.encode.batches import default_readers, index_batches
    from pairkit.encode.device_pipeline import DevicePipeline
    from pairkit.encode.images import discover_images
    from pairkit.encode.registry import EncoderRequest, load_encoder

    pre = load_encoder(EncoderRequest(model, pretrained="none")).preprocess
    files, _ = discover_images(folder)
    with DevicePipeline(files, 1, pre, 0, device, default_readers()) as pipe:
        t0 = time.perf_counter()
        n = sum(len(p.ok) for p in pipe.batches(index_batches(len(files), batch)))
        if device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        return n / (time.perf_counter() - t0)


def pipeline_alone(folder: Path, model: str, batch: int, workers: int) -> float:
    import torch

    from pairkit.encode.batches import SourceDataset, collate, index_batches, worker_init
    from pairkit.encode.images import discover_images
    from pairkit.encode.registry import EncoderRequest, load_encoder

    pre = load_encoder(EncoderRequest(model, pretrained="none")).preprocess
    files, _ = discover_images(folder)
    loader = torch.utils.data.DataLoader(
        SourceDataset(files, 1, pre, 0), batch_sampler=index_batches(len(files), batch),
        num_workers=workers, collate_fn=collate,
        worker_init_fn=worker_init if workers else None,
    )
    t0 = time.perf_counter()
    n = sum(len(b[0]) + len(b[1]) for b in loader)
    return n / (time.perf_counter() - t0)


def whole_command(folder: Path, model: str, device: str, batch: int, workers: int | None,
                  precision: str, decode: str = "cpu") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pairkit", "embed", str(folder), "-o", f"{tmp}/store",
               "--model", model, "--pretrained", "none", "--device", device,
               "--batch-size", str(batch), "--precision", precision, "--quiet", "--json",
               "--decode", decode]
        if workers is not None:
            cmd += ["--workers", str(workers)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, "images": summary["images"],
            "images_per_s_wall": summary["images"] / wall,
            "images_per_s_run": summary["images_per_second"]}


def _child_pipeline(folder: Path, views: int, batch: int, device: str) -> None:
    """Runs in a child with the checkout under test first on PYTHONPATH: the pipeline
    alone through the API both old and new checkouts have (DevicePipeline.batches);
    prints JSON."""
    from pairkit.encode.device_pipeline import DevicePipeline
    from pairkit.encode.images import discover_images
    from pairkit.encode.registry import Preprocess

    pre = Preprocess(size=224, mean=(0.48145466, 0.4578275, 0.40821073),
                     std=(0.26862954, 0.26130258, 0.27577711))
    files, _ = discover_images(folder)
    per_batch = max(1, batch // views)
    idx = [list(range(i, min(i + per_batch, len(files))))
           for i in range(0, len(files), per_batch)]
    with DevicePipeline(files, views, pre, 0, device, 2) as pipe:
        next(iter(pipe.batches(idx[:1])))  # warm-up: imports, first allocations
        t0, c0 = time.perf_counter(), time.process_time()
        n = sum(len(p.ok) for p in pipe.batches(idx))
        if device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"images": n, "wall_s": wall, "cpu_s": cpu}))


def compare(args: argparse.Namespace) -> None:
    """Before/after: the pipeline alone and the whole command per checkout (module doc)."""
    import os as _os

    here = Path(__file__).resolve()
    checkouts = [here.parents[2], *[c.resolve() for c in args.compare]]
    n = 300 if args.quick else args.n
    w, h = (int(v) for v in args.image_size.split("x"))
    views = [int(v) for v in args.views.split(",")]
    base = {k: v for k, v in _os.environ.items() if k != "PYTHONPATH"}
    res: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "images"
        make_jpegs(folder, n, (w, h))
        for _ in range(args.rounds):
            for c in checkouts:
                env = {**base, "PYTHONPATH": str(c)}
                for v in views:
                    key = f"views={v}"
                    out = subprocess.run(
                        [sys.executable, str(here), "--child-pipeline", str(folder),
                         "--views", str(v), "--batch-size", str(args.batch_size),
                         "--device", args.device], capture_output=True, text=True,
                        env=env, check=True)
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                    res.setdefault(str(c), {}).setdefault(f"pipeline {key}", []).append(row)
                    print(f"  {c} pipeline {key}: {row['images'] / row['wall_s']:.1f} img/s, "
                          f"{row['cpu_s']:.2f} CPU s", flush=True)
                    if args.pipeline_only:
                        continue
                    with tempfile.TemporaryDirectory() as st:
                        cmd = [sys.executable, "-m", "pairkit", "embed", str(folder), "-o",
                               f"{st}/s", "--model", args.model, "--pretrained", "none",
                               "--device", args.device, "--batch-size", str(args.batch_size),
                               "--views", str(v), "--decode", "gpu", "-q", "--json"]
                        t0 = time.perf_counter()
                        out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                             check=True)
                        wall = time.perf_counter() - t0
                    js = json.loads(out.stdout.strip().splitlines()[-1])
                    res[str(c)].setdefault(f"embed {key}", []).append(
                        {"images": js["images"], "wall_s": wall,
                         "loop_s": js["loop_seconds"]})
    print(f"{n} JPEGs {args.image_size}, {args.model} (random weights), --device "
          f"{args.device}, batch {args.batch_size}, best of {args.rounds}; "
          f"{_os.cpu_count()} CPUs, load {_os.getloadavg()[0]:.1f}")
    print("| checkout | measure | images/s (best) | CPU s (pipeline) |")
    print("|---|---|---|---|")
    summary: dict[str, dict[str, float]] = {}
    for c, measures in res.items():
        for name, rows in measures.items():
            if name.startswith("pipeline"):
                best = max(r["images"] / r["wall_s"] for r in rows)
                cpu = min(r["cpu_s"] for r in rows)
                print(f"| {c} | {name} alone | {best:.1f} | {cpu:.2f} |")
            else:
                best = max(r["images"] / r["loop_s"] for r in rows)
                print(f"| {c} | {name} loop | {best:.1f} | |")
            summary.setdefault(c, {})[name] = round(best, 2)
    if args.out:
        args.out.write_text(json.dumps({"runs": res, "best_images_per_s": summary,
                                        "images": n, "rounds": args.rounds}, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", action="append", type=Path, default=[],
                    help="before/after against another checkout (repeatable)")
    ap.add_argument("--views", default="1,4", help="--compare: comma list of --views")
    ap.add_argument("--rounds", type=int, default=3, help="--compare: rounds (best of)")
    ap.add_argument("--pipeline-only", action="store_true",
                    help="--compare: the pipeline alone, no whole embed command")
    ap.add_argument("--child-pipeline", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--model", default="openclip/ViT-S-32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--n", type=int, default=1500, help="images in the generated folder")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", default="default,0,1", help="comma list; 'default' = pairkit's")
    ap.add_argument("--decodes", default="cpu,gpu",
                    help="comma list of --decode values; gpu runs with default readers only")
    ap.add_argument("--image-size", default="400x300")
    ap.add_argument("--quick", action="store_true", help="300 images, short timings")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.child_pipeline:
        _child_pipeline(args.child_pipeline, int(args.views), args.batch_size, args.device)
        return
    if args.compare:
        compare(args)
        return
    n = 300 if args.quick else args.n
    w, h = (int(v) for v in args.image_size.split("x"))
    precision = args.precision
    if precision == "auto":
        precision = "fp16" if args.device.startswith("cuda") else "fp32"

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "images"
        make_jpegs(folder, n, (w, h))
        enc_rate = encoder_alone(args.model, args.device, args.batch_size, precision,
                                 5.0 if args.quick else 20.0)
        rows = []
        decodes = args.decodes.split(",")
        specs = [("cpu", w) for w in args.workers.split(",")] if "cpu" in decodes else []
        specs += [("gpu", "default")] if "gpu" in decodes else []
        for decode, spec in specs:
            workers = None if spec == "default" else int(spec)
            from pairkit.encode.batches import default_readers, default_workers

            if decode == "gpu":
                used = default_readers() if workers is None else workers
                pipe = device_pipeline_alone(folder, args.model, args.batch_size, args.device)
                label = f"gpu, {used} reader threads"
            else:
                used = default_workers(args.device) if workers is None else workers
                pipe = pipeline_alone(folder, args.model, args.batch_size, used)
                label = f"cpu, {used} workers" + (" (default)" if workers is None else "")
            run = whole_command(folder, args.model, args.device, args.batch_size, workers,
                                precision, decode)
            rows.append({"decode": decode, "workers": label,
                         "pipeline_images_per_s": pipe, **run,
                         "ratio_run": run["images_per_s_run"] / enc_rate,
                         "ratio_wall": run["images_per_s_wall"] / enc_rate})
    result = {
        "model": args.model, "device": args.device, "precision": precision,
        "batch_size": args.batch_size, "images": n, "image_size": args.image_size,
        "cpus": os.cpu_count(), "machine": platform.machine(),
        "encoder_alone_images_per_s": enc_rate, "runs": rows,
    }
    print(f"model {args.model}, {args.device} {precision}, batch {args.batch_size}, "
          f"{n} JPEGs {args.image_size}, {os.cpu_count()} CPUs")
    print(f"encoder alone: {enc_rate:.1f} images/s\n")
    print("| decode, workers | decode+resize alone (img/s) | embed run (img/s) | ratio to encoder "
          "| whole command wall (img/s) | ratio (wall) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workers']} | {r['pipeline_images_per_s']:.1f} | "
              f"{r['images_per_s_run']:.1f} | {r['ratio_run']:.2f} | "
              f"{r['images_per_s_wall']:.1f} | {r['ratio_wall']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
