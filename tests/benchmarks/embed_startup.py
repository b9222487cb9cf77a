"""Fixed cost of `pairkit embed` beyond `import torch`, measured ratio-safe in one run.

    python tests/benchmarks/embed_startup.py [--rounds 5] [--device cpu]
        [--model openclip/ViT-B-32] [--checkout OTHER ...] [--out FILE]

Each round runs, one after the other (so load changes hit all alike): a bare
``python -c "import torch"``, then for each checkout (this one first, then each
``--checkout``, e.g. the main branch for a before/after) ``pairkit embed`` of 4 generated
JPEGs into a fresh store (``--pretrained none``) and the same command again with nothing
left to do. Reported: the best of the rounds of each, and the fixed cost = best embed -
best ``import torch`` (the issue's figure), also without the loop (``loop_seconds``), in
wall seconds and in CPU seconds of the child (user + system: far less sensitive to the
load of a shared machine than wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child: user + system, its stdout)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed: {err.read()[-2000:]}")
        return wall, usage.ru_utime + usage.ru_stime, out.read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="openclip/ViT-B-32")
    ap.add_argument("--checkout", action="append", default=[], type=Path,
                    help="another checkout to time the same way (repeatable)")
    ap.add_argument("--no-rerun", action="store_true",
                    help="skip the rerun with nothing to do (the GPU suite's time guard)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from embed_throughput import make_jpegs

    checkouts = [ROOT, *[c.resolve() for c in args.checkout]]
    work = Path(tempfile.mkdtemp(prefix="pairkit-startup-"))
    try:
        make_jpegs(work / "images", 4, (400, 300))
        base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        torch_s: list[float] = []
        torch_cpu: list[float] = []
        runs: dict[str, dict[str, list[float]]] = {
            str(c): {"embed": [], "cpu": [], "loop": [], "rerun": [], "rerun_cpu": []}
            for c in checkouts}
        for _ in range(args.rounds):
            wall, cpu, _ = timed([sys.executable, "-c", "import torch"], base)
            torch_s.append(wall)
            torch_cpu.append(cpu)
            for c in checkouts:
                env = {**base, "PYTHONPATH": str(c)}
                store = work / "store"
                shutil.rmtree(store, ignore_errors=True)
                cmd = [sys.executable, "-m", "pairkit", "embed", str(work / "images"), "-o",
                       str(store), "--model", args.model, "--pretrained", "none",
                       "--device", args.device, "-q", "--json"]
                wall, cpu, out = timed(cmd, env)
                runs[str(c)]["embed"].append(wall)
                runs[str(c)]["cpu"].append(cpu)
                runs[str(c)]["loop"].append(json.loads(out.strip().splitlines()[-1])
                                            ["loop_seconds"])
                if not args.no_rerun:
                    wall, cpu, _ = timed(cmd, env)
                    runs[str(c)]["rerun"].append(wall)
                    runs[str(c)]["rerun_cpu"].append(cpu)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best_torch, best_torch_cpu = min(torch_s), min(torch_cpu)
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.machine(),
              "cpus": os.cpu_count(), "load_before": os.getloadavg()[0], "rounds": args.rounds,
              "model": args.model, "device": args.device, "import_torch_s": torch_s,
              "import_torch_cpu_s": torch_cpu, "best_import_torch_s": round(best_torch, 3),
              "best_import_torch_cpu_s": round(best_torch_cpu, 3), "checkouts": {}}
    print(f"{args.model} --pretrained none --device {args.device}, 4 JPEGs, best of "
          f"{args.rounds} rounds; import torch {best_torch:.2f} s wall, "
          f"{best_torch_cpu:.2f} s CPU")
    print("| checkout | embed (s) | fixed cost beyond import torch (s) | same, loop excluded "
          "(s) | fixed cost, CPU s | rerun, nothing to do (s) | rerun beyond import torch, "
          "CPU s |")
    print("|---|---|---|---|---|---|---|")
    for c, r in runs.items():
        i = min(range(len(r["embed"])), key=r["embed"].__getitem__)
        row = {"embed_s": r["embed"], "loop_s": r["loop"], "rerun_s": r["rerun"],
               "best_embed_s": round(r["embed"][i], 3),
               "fixed_cost_s": round(r["embed"][i] - best_torch, 3),
               "fixed_cost_without_loop_s": round(r["embed"][i] - r["loop"][i] - best_torch, 3),
               "fixed_cost_cpu_s": round(min(r["cpu"]) - best_torch_cpu, 3),
               "best_rerun_s": round(min(r["rerun"]), 3) if r["rerun"] else None,
               "rerun_beyond_torch_cpu_s": (round(min(r["rerun_cpu"]) - best_torch_cpu, 3)
                                            if r["rerun_cpu"] else None)}
        result["checkouts"][c] = row
        print(f"| {c} | {row['best_embed_s']:.2f} | {row['fixed_cost_s']:.2f} | "
              f"{row['fixed_cost_without_loop_s']:.2f} | {row['fixed_cost_cpu_s']:.2f} | "
              f"{row['best_rerun_s']} | {row['rerun_beyond_torch_cpu_s']} |")
    result["load_after"] = os.getloadavg()[0]
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
