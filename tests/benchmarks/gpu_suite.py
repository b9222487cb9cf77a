"""Every GPU figure of issues 11 and 24 in one run, one JSON: see gpu_suite.sh (the entry point).

    python tests/benchmarks/gpu_suite.py --out gpu_suite.json --log gpu_suite.log
        [--parts tests,startup,...] [--smoke] [--dry-run]

Parts, each in a child process with its own time guard inside one overall budget (a slow
part can't eat the rest; what a part measured before its guard fired is kept):

- ``tests``: ``pytest -q`` of the whole suite with the GPU visible (issue 16), in xdist
  workers of one thread each;
- ``startup``: the fixed cost of ``pairkit embed`` beyond ``import torch`` as issue 24
  measures it (4 JPEGs, ``--model openclip/ViT-B-32 --pretrained none``, best of 3 rounds,
  minus the best bare ``import torch``: tests/benchmarks/embed_startup.py);
- ``embed``: open_clip ViT-B-32 (random weights) fp16, batch 256, generated 400x300 JPEGs:
  encoder alone on device tensors, bare batched ``decode_jpeg`` on the device (the
  ceiling of the decode pipeline), the decode pipelines alone (``--decode gpu`` with 1
  and 4 views, and the PIL one), whole ``pairkit embed`` commands with ``--decode gpu``
  (all N images) and ``--decode cpu`` (a subset), and their fixed cost beyond the loop;
- ``data``: a 1,000,000 x 512 float16 store (two views per source, labels) and a
  100,000-row query store of the same clusters, generated on the device;
- ``mine``: ``mine --hard -k 5 --backend torch`` (whole command, its search part), the
  torch search alone, and the plain torch reference of the issue (fp16 matmul + topk over
  blocks of 16,384 queries);
- ``eval``: ``eval REF --against QUERIES --metrics knn,retrieval`` (100,000 x 1,000,000);
- ``fn``: ``mine --filter-false-negatives``, label-free rules and default rules, against
  plain mining of the same store (run here when the ``mine`` part did not run); then the
  label-free rules with the torch search on a 60,000-row store whose first 20,000 rows
  are one source (big_source_mine.py's), whose rows the searches skip, not fetch.

``--smoke``: tiny sizes on the CPU (seconds to a minute a part), to check the script itself;
``--dry-run``: the plan (parts, time guards, budget, the packages each part needs) in the
JSON, nothing run (the test suite runs both: tests/test_gpu_suite.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("tests", "startup", "embed", "data", "mine", "eval", "fn")
# (cap seconds, seconds kept back for it while earlier parts run)
GUARDS = {"tests": (165, 60), "startup": (60, 30), "embed": (110, 50), "data": (60, 20),
          "mine": (80, 40), "eval": (45, 25), "fn": (150, 60)}
# the modules each part imports (checked by --dry-run; installed or carried as wheels)
NEEDS = {"tests": ("torch", "pytest", "xdist", "faiss", "open_clip"),
         "startup": ("torch", "open_clip", "torchvision"),
         "embed": ("torch", "torchvision", "open_clip"), "data": ("torch", "pandas"),
         "mine": ("torch", "faiss"), "eval": ("torch", "faiss"), "fn": ("torch", "faiss")}
FULL = {"images": 50_000, "cpu_images": 10_000, "pipeline_images": 10_000,
        "batch": 256, "n": 1_000_000, "queries": 100_000, "dim": 512, "encoder_s": 8.0,
        "big_rows": 60_000, "big_source": 20_000, "big_dim": 128}
SMOKE = {"images": 48, "cpu_images": 24, "pipeline_images": 24, "batch": 16,
         "n": 6_000, "queries": 1_000, "dim": 64, "encoder_s": 1.0,
         "big_rows": 3_000, "big_source": 1_000, "big_dim": 32}
MODEL = "openclip/ViT-B-32"
CLASSES = 16  # the generated stores' labels (see part_data)


# -- the parent ------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("gpu_suite.json"))
    ap.add_argument("--log", type=Path, default=Path("gpu_suite.log"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/pairkit-gpu-suite"))
    ap.add_argument("--budget", type=float, default=430.0, help="seconds for all parts")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma list of parts, run in this order: {','.join(PARTS)}")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--dry-run", action="store_true",
                    help="write the plan to the JSON and run nothing")
    ap.add_argument("--part", help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part:
        run_part(args)
        return
    asked = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(asked) - set(PARTS))
    if unknown:  # refused before environment() imports torch and the rest (seconds)
        ap.error(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    t0 = time.time()
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"smoke": args.smoke, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "budget_s": args.budget, "env": environment(), "parts": {}}
    wanted = [p for p in PARTS if p in asked]
    if args.dry_run:
        result["dry_run"] = True
        result["parts"] = plan(wanted, args.budget)
        write(args.out, result)
        print(summary(result))
        return
    with open(args.log, "a") as log:
        log.write(f"== gpu suite {result['started']} smoke={args.smoke}\n"
                  f"{json.dumps(result['env'])}\n")
        log.flush()
        for n, part in enumerate(wanted):
            cap, _ = GUARDS[part]
            later = sum(GUARDS[p][1] for p in wanted[n + 1 :])
            left = args.budget - (time.time() - t0)
            guard = min(cap, left - later)
            if guard < 10:
                result["parts"][part] = {"skipped": f"budget: {left:.0f} s left"}
                continue
            result["parts"][part] = child(part, guard, args, log)
            write(args.out, result)
    result["seconds"] = round(time.time() - t0, 1)
    write(args.out, result)
    print(summary(result))


def plan(wanted: list[str], budget: float) -> dict[str, Any]:
    """What a run of ``wanted`` would do: each part's time guard when every earlier part
    used all of its own (the cap, or what the budget leaves after the time kept back for
    the later parts), and the modules it needs with whether this Python finds them."""
    import importlib.util

    out: dict[str, Any] = {}
    left = budget
    for n, part in enumerate(wanted):
        cap, _ = GUARDS[part]
        later = sum(GUARDS[p][1] for p in wanted[n + 1 :])
        guard = min(cap, left - later)
        out[part] = {"worst_case_guard_s": round(guard), "runs": guard >= 10,
                     "needs": {m: importlib.util.find_spec(m) is not None
                               for m in NEEDS[part]}}
        left -= max(0.0, guard)
    return out


def child(part: str, guard: float, args: argparse.Namespace, log: Any) -> dict[str, Any]:
    """Run one part in a child (own process group), killed after ``guard`` seconds."""
    res_file = args.work / f"{part}.json"
    res_file.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--part", part, "--result", str(res_file),
           "--work", str(args.work), "--deadline", str(time.time() + guard - 3)]
    if args.smoke:
        cmd.append("--smoke")
    log.write(f"\n== part {part} (guard {guard:.0f} s)\n")
    log.flush()
    t = time.time()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    timed_out = False
    try:
        proc.wait(timeout=guard)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out: dict[str, Any] = {}
    if res_file.exists():
        try:
            out = json.loads(res_file.read_text())
        except ValueError:
            out = {"error": "unreadable part result"}
    out.update({"rc": proc.returncode, "timed_out": timed_out, "wall_s": round(time.time() - t, 1),
                "guard_s": round(guard)})
    print(f"{part}: {'timed out' if timed_out else f'rc {proc.returncode}'} "
          f"in {out['wall_s']} s", flush=True)
    return out


def write(path: Path, result: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                           "machine": platform.machine()}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["gpu_mem_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30)
    except Exception as exc:  # reported, not fatal
        env["torch"] = f"error: {exc}"
    for name in ("torchvision", "faiss", "open_clip", "transformers", "timm", "numpy", "pandas"):
        try:
            mod = __import__(name)
            env[name] = getattr(mod, "__version__", "?")
        except Exception:
            env[name] = None
    try:
        import faiss

        env["faiss_gpus"] = int(faiss.get_num_gpus())
    except Exception:
        env["faiss_gpus"] = None
    return env


def summary(r: dict[str, Any]) -> str:
    p = r["parts"]
    lines = [f"gpu suite ({r['env'].get('gpu', 'no GPU')}), {r.get('seconds')} s"]
    for name, part in p.items():
        keep = {k: v for k, v in part.items() if not isinstance(v, (dict, list))}
        lines.append(f"  {name}: {json.dumps(keep)}")
    return "\n".join(lines)


# -- the parts ---------------------------------------------------------------------------
class Part:
    """A part's results, written to disk after every measurement."""

    def __init__(self, path: Path, deadline: float) -> None:
        self.path = path
        self.deadline = deadline
        self.data: dict[str, Any] = {}

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        write(self.path, self.data)
        print(f"  {key}: {json.dumps(value, default=str)[:400]}", flush=True)

    def left(self) -> float:
        return self.deadline - time.time()


def run_part(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    part = Part(args.result, args.deadline)
    size = SMOKE if args.smoke else FULL
    try:
        {"tests": part_tests, "startup": part_startup, "embed": part_embed,
         "data": part_data, "mine": part_mine, "eval": part_eval,
         "fn": part_fn}[args.part](part, args.work, size, args.smoke)
    except Exception as exc:
        import traceback

        traceback.print_exc()
        part.set("error", f"{type(exc).__name__}: {exc}")
        sys.exit(1)


def device(smoke: bool) -> str:
    return "cpu" if smoke else "cuda"


def sync(dev: str) -> None:
    if dev.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def pairkit(*args: str, timeout: float) -> tuple[float, str, str, int]:
    """Run ``python -m pairkit ARGS``: (wall seconds, stdout, stderr tail, exit code)."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pairkit", *args], capture_output=True,
                          text=True, timeout=max(5.0, timeout), cwd=ROOT)
    wall = time.perf_counter() - t
    if proc.returncode:
        print(proc.stderr[-3000:], flush=True)
    return wall, proc.stdout, proc.stderr[-600:], proc.returncode


def mine_with_stats(ref: Path, out: Path, name: str, *extra: str, timeout: float
                    ) -> tuple[float, dict[str, Any], dict[str, Any] | None]:
    """``pairkit mine REF --hard -k 5 --backend torch EXTRA`` writing
    ``out/pairs-NAME.parquet`` and ``out/stats-NAME.json``: (wall seconds, a row with
    ``wall_s`` and ``rc`` (``error`` when it failed), the stats or None)."""
    stats = out / f"stats-{name}.json"
    wall, _, err, rc = pairkit("mine", str(ref), "--hard", "-k", "5", "--backend", "torch",
                               *extra, "-o", str(out / f"pairs-{name}.parquet"), "--stats",
                               str(stats), "-q", "--force", timeout=timeout)
    row: dict[str, Any] = {"wall_s": round(wall, 2), "rc": rc}
    if rc:
        row["error"] = err
        return wall, row, None
    return wall, row, json.loads(stats.read_text())


def part_tests(part: Part, work: Path, size: dict, smoke: bool) -> None:
    import importlib.util

    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short"]
    if smoke:
        cmd += ["tests/index/test_torch_search.py"]
    elif importlib.util.find_spec("xdist") is not None:
        cmd += ["-n", str(max(2, min(14, (os.cpu_count() or 2) - 2)))]
    t = time.perf_counter()
    # one thread per library in each xdist worker: 14 workers x 16 threads thrash
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "PAIRKIT_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=max(5.0, part.left()))
    print(proc.stdout[-30000:], proc.stderr[-2000:], flush=True)
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    part.set("command", " ".join(cmd[1:]))
    part.set("summary", lines[-1] if lines else proc.stderr[-300:])
    part.set("failures", [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))][:20])
    part.set("exit_code", proc.returncode)
    part.set("seconds", round(time.perf_counter() - t, 1))


# start-up ------------------------------------------------------------------------------
def part_startup(part: Part, work: Path, size: dict, smoke: bool) -> None:
    """tests/benchmarks/embed_startup.py: best of 3 rounds (1 in smoke), no rerun."""
    out = work / "startup-result.json"
    cmd = [sys.executable, str(ROOT / "tests" / "benchmarks" / "embed_startup.py"),
           "--rounds", "1" if smoke else "3", "--device", device(smoke), "--no-rerun",
           "--model", MODEL, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          timeout=max(5.0, part.left() - 2))
    print(proc.stdout[-3000:], proc.stderr[-3000:], flush=True)
    if proc.returncode:
        part.set("error", proc.stderr[-600:])
        return
    res = json.loads(out.read_text())
    row = next(iter(res["checkouts"].values()))
    part.set("import_torch_s", res["best_import_torch_s"])
    part.set("import_torch_cpu_s", res["best_import_torch_cpu_s"])
    part.set("embed_4_jpegs_s", row["best_embed_s"])
    part.set("fixed_cost_beyond_import_torch_s", row["fixed_cost_s"])
    part.set("fixed_cost_without_loop_s", row["fixed_cost_without_loop_s"])
    part.set("fixed_cost_cpu_s", row["fixed_cost_cpu_s"])
    part.set("rounds", res["rounds"])


# embed ---------------------------------------------------------------------------------
def _jpegs(args: tuple[Path, int, int]) -> None:
    from PIL import Image, ImageFilter

    folder, start, count = args
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(start, start + count):
        rng = np.random.default_rng(i)
        small = rng.integers(0, 255, (300 // 16, 400 // 16, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize((400, 300), Image.Resampling.BILINEAR)
        img.filter(ImageFilter.GaussianBlur(1)).save(folder / f"img{i:06d}.jpg", quality=90)


def make_folder(root: Path, n: int, per_dir: int = 2000) -> list[Path]:
    """``n`` distinct photo-like 400x300 JPEGs in sub-folders of ``per_dir``; returns them."""
    from multiprocessing import Pool

    jobs = [(root / f"d{s // per_dir:03d}", s, min(per_dir, n - s)) for s in range(0, n, per_dir)]
    chunks = [(f, s + o, min(250, c - o)) for f, s, c in jobs for o in range(0, c, 250)]
    with Pool(max(1, min(16, os.cpu_count() or 1))) as pool:
        pool.map(_jpegs, chunks)
    return sorted({f for f, _, _ in jobs})


def subset(root: Path, folders: list[Path], n_dirs: int) -> Path:
    """A folder of symlinks to the first ``n_dirs`` sub-folders (discovery follows them)."""
    root.mkdir(parents=True, exist_ok=True)
    for f in folders[:n_dirs]:
        link = root / f.name
        if not link.exists():
            link.symlink_to(f, target_is_directory=True)
    return root


def part_embed(part: Part, work: Path, size: dict, smoke: bool) -> None:
    import shutil

    import torch

    dev = device(smoke)
    folder = work / "jpegs"
    shutil.rmtree(folder, ignore_errors=True)
    t = time.perf_counter()
    per_dir = 12 if smoke else 2000
    dirs = make_folder(folder, size["images"], per_dir)
    part.set("images", size["images"])
    part.set("make_jpegs_s", round(time.perf_counter() - t, 1))
    batch = size["batch"]
    precision = "fp32" if smoke else "fp16"
    part.set("setup", {"model": MODEL, "pretrained": "none", "precision": precision,
                       "batch": batch, "device": dev, "image_size": "400x300"})

    # 1. encoder alone on device tensors
    from pairkit.encode.registry import EncoderRequest, load_encoder
    from pairkit.encode.runner import Runner

    enc = load_encoder(EncoderRequest(MODEL, pretrained="none", device=dev))
    runner = Runner(enc, dev, precision)
    s = enc.preprocess.size
    pixels = torch.randint(0, 255, (batch, 3, s, s), dtype=torch.uint8, device=dev)
    runner(pixels)
    sync(dev)
    done, t = 0, time.perf_counter()
    while time.perf_counter() - t < size["encoder_s"]:
        runner(pixels)
        done += batch
    sync(dev)
    enc_rate = done / (time.perf_counter() - t)
    part.set("encoder_alone_images_per_s", round(enc_rate, 1))
    del runner

    # 2. the decode pipelines alone (no encoder)
    from pairkit.encode.batches import default_readers, index_batches
    from pairkit.encode.device_pipeline import DevicePipeline
    from pairkit.encode.images import discover_images

    files, _ = discover_images(folder)
    m = min(len(files), size["pipeline_images"])
    batches = index_batches(m, batch)
    with DevicePipeline(files[:m], 1, enc.preprocess, 0, dev, default_readers()) as pipe:
        next(iter(pipe.batches(batches[:1])))  # warm-up: nvjpeg handles, kernels
        sync(dev)
        t = time.perf_counter()
        n = sum(len(p.ok) for p in pipe.batches(batches))
        sync(dev)
    part.set("gpu_decode_pipeline_alone_images_per_s", round(n / (time.perf_counter() - t), 1))
    part.set("gpu_decode_pipeline_readers", default_readers())
    part.set("bare_batched_decode_jpeg_images_per_s",
             round(_bare_decode_rate(files[:m], dev, batch), 1))
    m4 = max(1, m // 4)  # 4 views: the batched crops, flips and jitter
    with DevicePipeline(files[:m4], 4, enc.preprocess, 0, dev, default_readers()) as pipe:
        b4 = index_batches(m4, max(1, batch // 4))
        next(iter(pipe.batches(b4[:1])))
        sync(dev)
        t = time.perf_counter()
        n4 = sum(len(p.ok) for p in pipe.batches(b4))
        sync(dev)
    part.set("gpu_decode_pipeline_alone_views4_images_per_s",
             round(n4 / (time.perf_counter() - t), 1))
    m_cpu = min(m, size["cpu_images"] // 2)
    part.set("cpu_decode_pipeline_alone_images_per_s",
             round(_pil_pipeline_rate(files[:m_cpu], enc.preprocess, dev, batch), 1))

    # 3. whole commands
    t_torch = _import_torch_seconds()
    part.set("import_torch_s", round(t_torch, 2))
    common = ["--model", MODEL, "--pretrained", "none", "--device", dev, "--batch-size",
              str(batch), "--precision", precision, "--quiet", "--json"]
    for name, target, decode in (("gpu_decode_all", folder, "gpu"),
                                 ("cpu_decode_subset",
                                  subset(work / "jpegs-subset", dirs,
                                         max(1, size["cpu_images"] // per_dir)), "cpu")):
        if part.left() < 15:
            part.set(f"whole_command_{name}", {"skipped": "time guard"})
            continue
        store = work / f"store-{name}"
        shutil.rmtree(store, ignore_errors=True)
        wall, out, err, rc = pairkit("embed", str(target), "-o", str(store), "--decode", decode,
                                     *common, timeout=part.left() - 2)
        row: dict[str, Any] = {"decode": decode, "wall_s": round(wall, 2), "rc": rc}
        if rc == 0:
            js = json.loads(out.strip().splitlines()[-1])
            row.update(images=js["images"], loop_s=round(js["loop_seconds"], 2),
                       loop_images_per_s=js["images_per_second"],
                       decoded_on_device=js.get("decoded_on_device"),
                       wall_images_per_s=round(js["images"] / wall, 1),
                       fixed_cost_beyond_import_torch_s=round(
                           wall - js["loop_seconds"] - t_torch, 2),
                       loop_ratio_to_encoder=round(js["images_per_second"] / enc_rate, 3),
                       wall_ratio_to_encoder=round(js["images"] / wall / enc_rate, 3))
        else:
            row["error"] = err
        part.set(f"whole_command_{name}", row)
        shutil.rmtree(store, ignore_errors=True)


def _pil_pipeline_rate(files: list, pre: Any, dev: str, batch: int) -> float:
    """The --decode cpu pipeline alone: DataLoader with pairkit's default workers."""
    import torch

    from pairkit.encode.batches import (
        SourceDataset,
        collate,
        default_workers,
        index_batches,
        worker_init,
    )

    workers = default_workers(dev)
    loader = torch.utils.data.DataLoader(
        SourceDataset(files, 1, pre, 0), batch_sampler=index_batches(len(files), batch),
        num_workers=workers, collate_fn=collate,
        worker_init_fn=worker_init if workers else None)
    t = time.perf_counter()
    n = sum(len(b[0]) + len(b[1]) for b in loader)
    return n / (time.perf_counter() - t)


def _bare_decode_rate(files: list, dev: str, batch: int) -> float:
    """``torchvision.io.decode_jpeg`` on lists of ``batch`` files already in memory, on the
    device: the ceiling of the decode pipeline (no reading, hashing, drafting or views)."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    data = [torch.frombuffer(bytearray(f.abs_path.read_bytes()), dtype=torch.uint8)
            for f in files]
    chunks = [data[i : i + batch] for i in range(0, len(data), batch)]
    decode_jpeg(chunks[0], mode=ImageReadMode.RGB, device=dev)  # warm-up: handles, kernels
    sync(dev)
    t = time.perf_counter()
    for c in chunks:
        decode_jpeg(c, mode=ImageReadMode.RGB, device=dev)
    sync(dev)
    return len(data) / (time.perf_counter() - t)


def _import_torch_seconds() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - t


# data ----------------------------------------------------------------------------------
def part_data(part: Part, work: Path, size: dict, smoke: bool) -> None:
    """1M x 512 store (2 views per source) and a query store of other sources of the same
    clusters; float16 like embed's default. Two levels, like classes of real photos:
    16 classes (the label), each of fine clusters of ~50 sources (centre = class centre
    + 0.8 x noise: cosine ~0.74 within a fine cluster, ~0.45 across fine clusters of one
    class, ~0 across classes)."""
    import torch

    dev = device(smoke)
    n, nq, d = size["n"], size["queries"], size["dim"]
    g = torch.Generator(device=dev).manual_seed(0)
    n_src = n // 2
    classes = torch.randn(CLASSES, d, generator=g, device=dev)
    fine = max(CLASSES, n_src // 50)
    of_class = torch.arange(fine, device=dev) % CLASSES
    centres = classes[of_class] + 0.8 * torch.randn(fine, d, generator=g, device=dev)
    t = time.perf_counter()
    write_store(work / "ref", centres, n_src, 2, "s", g, dev)
    part.set("reference_store", {"rows": n, "dim": d, "classes": CLASSES, "fine_clusters": fine,
                                 "s": round(time.perf_counter() - t, 1)})
    t = time.perf_counter()
    write_store(work / "queries", centres, nq, 1, "q", g, dev)
    part.set("query_store", {"rows": nq, "s": round(time.perf_counter() - t, 1)})


def write_store(root: Path, centres: Any, n_src: int, views: int, prefix: str, g: Any,
                dev: str) -> None:
    import pandas as pd
    import torch

    from pairkit.core.store_writer import StoreWriter, prepare_store_dir

    prepare_store_dir(root, force=True)
    writer = StoreWriter.create(root, int(centres.shape[1]), "float16", {"name": "gpu-suite"})
    d = int(centres.shape[1])
    vecs = np.empty((n_src * views, d), dtype=np.float32)
    cluster = np.empty(n_src, dtype=np.int64)
    step = 131072
    for s0 in range(0, n_src, step):  # generated on the device in blocks
        m = min(step, n_src - s0)
        c = torch.randint(0, len(centres), (m,), generator=g, device=dev)
        base = centres[c] + 0.7 * torch.randn(m, d, generator=g, device=dev)
        rows = torch.stack([base + 0.3 * torch.randn(base.shape, generator=g, device=dev)
                            for _ in range(views)], dim=1).reshape(m * views, d)
        vecs[s0 * views : (s0 + m) * views] = rows.cpu().numpy()
        cluster[s0 : s0 + m] = c.cpu().numpy()
    names = np.char.add(np.char.add(prefix, np.repeat(np.arange(n_src), views).astype(str)),
                        ".jpg").astype(object)
    labels = np.char.add("c", np.repeat(cluster % CLASSES, views).astype(str)).astype(object)
    items = pd.DataFrame({"path": names, "source": names,
                          "view": np.tile(np.arange(views), n_src), "label": labels})
    writer.append(vecs, items)  # one shard: the items table is written once


# mine ----------------------------------------------------------------------------------
def part_mine(part: Part, work: Path, size: dict, smoke: bool) -> None:
    import torch

    from pairkit.core.store import Store

    dev = device(smoke)
    ref = work / "ref"
    if not (ref / "manifest.json").exists():
        part.set("skipped", "no data (the data part did not finish)")
        return
    out = work / "mine"
    out.mkdir(exist_ok=True)
    # 1. the whole command (the figure of the acceptance)
    _, row, st = mine_with_stats(ref, out, "naive", timeout=part.left() - 5)
    if st is not None:
        row.update(index=st["index"], k_initial=st["k_initial"], seconds=st["seconds"],
                   rows=st["rows"])
    part.set("whole_command", row)
    k = int(row.get("k_initial", 14))

    # 2. the torch search alone, in this process
    from pairkit.index.torch_search import TorchFlatIndex

    x = Store.open(ref, verify=False).vectors(np.float32)
    t = time.perf_counter()
    index = TorchFlatIndex(x, device=dev)
    sync(dev)
    part.set("torch_index_build_s", round(time.perf_counter() - t, 2))
    index.search(x[:2048], k)  # warm-up
    index.counts = {"rows": 0, "rows_searched_again": 0}
    t = time.perf_counter()
    index.search(x, k)
    part.set("torch_search", {"k": k, "s": round(time.perf_counter() - t, 2),
                              "dtype": index.dtype, **index.counts})
    del index

    # 3. the plain torch reference of the issue
    if part.left() < 20:
        part.set("torch_reference", {"skipped": "time guard"})
        return
    xt = torch.from_numpy(x).to(dev)
    xt = xt.half() if dev.startswith("cuda") else xt
    del x
    qb = 16384
    _ = (xt[:qb] @ xt.T).topk(7, dim=1)  # warm-up
    sync(dev)
    t = time.perf_counter()
    for s0 in range(0, len(xt), qb):
        _ = (xt[s0 : s0 + qb] @ xt.T).topk(7, dim=1)
    sync(dev)
    ref_s = time.perf_counter() - t
    part.set("torch_reference", {"what": "fp16 matmul + topk(7), blocks of 16,384 queries",
                                 "s": round(ref_s, 2)})
    search_s = row.get("seconds", {}).get("search")
    if search_s:
        part.set("search_part_ratio_to_reference", round(search_s / ref_s, 3))


# eval and false negatives ----------------------------------------------------------------
def part_eval(part: Part, work: Path, size: dict, smoke: bool) -> None:
    ref, queries = work / "ref", work / "queries"
    if not (queries / "manifest.json").exists():
        part.set("skipped", "no data")
        return
    wall, out, err, rc = pairkit("eval", str(ref), "--against", str(queries), "--metrics",
                                 "knn,retrieval", "--backend", "torch", "--json", "-q",
                                 timeout=part.left() - 2)
    row: dict[str, Any] = {"queries": size["queries"], "references": size["n"],
                           "wall_s": round(wall, 2), "rc": rc}
    if rc == 0:
        row["metrics"] = json.loads(out.strip().splitlines()[-1])
    else:
        row["error"] = err
    part.set("whole_command", row)


def part_fn(part: Part, work: Path, size: dict, smoke: bool) -> None:
    """``mine --filter-false-negatives``, label-free rules and default rules, against
    plain mining of the same store (the default rules read the labels; the label-free
    ones: near-duplicate, cluster: spectral clustering, the masked torch search); then
    the label-free rules on a store with one big source (:func:`big_source`)."""
    ref = work / "ref"
    out = work / "fn"
    out.mkdir(exist_ok=True)
    if (ref / "manifest.json").exists():
        versus_naive(part, ref, out, work / "mine.json")
    else:
        part.set("skipped", "no data (the data part did not finish)")
    big_source(part, work, size)


def versus_naive(part: Part, ref: Path, out: Path, naive: Path) -> None:
    nw = None
    if naive.exists():
        nw = json.loads(naive.read_text()).get("whole_command", {}).get("wall_s")
    if nw is None:  # the mine part did not run: plain mining of the same store first
        wall, row0, st = mine_with_stats(ref, out, "naive", timeout=part.left() - 2)
        if st is not None:
            row0.update(seconds=st["seconds"], index=st["index"],
                        negatives_same_label=st.get("negatives_same_label"))
            nw = wall
        part.set("naive", row0)
    for name, rules in (("label_free", ["--fn-rules", "near-duplicate,cluster"]),
                        ("default_rules", [])):
        if part.left() < 15:
            part.set(name, {"skipped": "time guard"})
            continue
        wall, row, st = mine_with_stats(ref, out, name, "--filter-false-negatives", *rules,
                                        timeout=part.left() - 2)
        if st is not None:
            row.update(rules=st["false_negative_rules"], seconds=st["seconds"],
                       index=st["index"], clusters=st.get("clusters"),
                       negatives_same_label=st.get("negatives_same_label"),
                       fn_estimate=st.get("fn_estimate"))
            if nw:
                row["ratio_to_naive_mining"] = round(wall / nw, 2)
        part.set(name, row)


def big_source(part: Part, work: Path, size: dict) -> None:
    """The label-free rules (near-duplicate, mutual-neighbour, cluster) with the torch
    search on a store whose first rows are one source (a video's frames): the searches
    skip that source's rows by their source codes instead of fetching and dropping them
    (tests/benchmarks/big_source_mine.py's store, generated here on the CPU)."""
    rows, big, dim = size["big_rows"], size["big_source"], size["big_dim"]
    if part.left() < 30:
        part.set("big_source", {"skipped": "time guard"})
        return
    from big_source_mine import make_store  # tests/benchmarks/, this script's folder

    folder = work / "big-source"
    folder.mkdir(exist_ok=True)
    store = folder / "store"
    t = time.perf_counter()
    if not (store / "manifest.json").exists():
        make_store(rows, big, dim, folder, sys.executable, str(ROOT))
    made = time.perf_counter() - t
    wall, row, st = mine_with_stats(
        store, folder, "big", "--filter-false-negatives", "--fn-rules",
        "near-duplicate,mutual-neighbour,cluster", timeout=part.left() - 2)
    row.update(rows=rows, big_source_rows=big, dim=dim, store_made_s=round(made, 1))
    if st is not None:
        row.update(seconds=st["seconds"], index=st["index"], clusters=st.get("clusters"),
                   negatives_same_label=st.get("negatives_same_label"))
    part.set("big_source", row)


if __name__ == "__main__":
    main()
