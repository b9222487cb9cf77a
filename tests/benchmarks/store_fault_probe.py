"""Fault probe of the store (issue 15), run by hand: kills, races and damage, via the CLI.

    python tests/benchmarks/store_fault_probe.py [--kills 8] [--flips 40]

1. ``kill -9`` of ``embed`` at random moments, then a rerun: the store must equal a
   clean run's (same rows, same vectors) and open with verify.
2. Two ``embed`` runs racing into one store while files are added: each exits 0 or 1
   with the holder's name; the store ends valid and complete.
3. ``mine`` while ``embed`` appends: every run exits 0.
4. Random bit flips in every store file, each followed by ``mine``: every run exits 1
   with one line, never 0, never ``internal error``.

Prints one line per part and exits 1 when any check failed.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pairkit.core.store import Store  # noqa: E402
from tests.conftest import make_images  # noqa: E402
from tests.proc import REPO, child_env, run_pairkit  # noqa: E402

EMBED = ["--model", "pixels", "--labels", "folder", "-q", "--shard-rows", "16",
         "--workers", "0"]


def embed_cmd(images: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "pairkit", "embed", str(images), "-o", str(out), *EMBED]


def same_store(a: Path, b: Path) -> bool:
    sa, sb = Store.open(a), Store.open(b)
    ia = sa.items.drop(columns="id").set_index("path").sort_index()
    ib = sb.items.drop(columns="id").set_index("path").sort_index()
    va = sa.vectors()[np.argsort(sa.items["path"].to_numpy())]
    vb = sb.vectors()[np.argsort(sb.items["path"].to_numpy())]
    return ia.equals(ib) and np.array_equal(va, vb)


def kills(work: Path, images: Path, n: int, rng: random.Random) -> bool:
    clean = work / "clean"
    assert run_pairkit("embed", images, "-o", clean, *EMBED, timeout=600).returncode == 0
    ok = True
    for k in range(n):
        out = work / f"killed{k}"
        proc = subprocess.Popen(embed_cmd(images, out), cwd=REPO, env=child_env(),
                                stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(1.0, 8.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        r = run_pairkit("embed", images, "-o", out, *EMBED, timeout=600)
        good = r.returncode == 0 and same_store(out, clean)
        ok &= good
        print(f"  kill {k}: rerun exit {r.returncode}, equal to clean run: {good}")
    return ok


def race(work: Path, rng: random.Random) -> bool:
    images = work / "race-images"
    make_images(images, n_per_class=30, classes=2, seed=5)
    out = work / "race"
    run_pairkit("embed", images, "-o", out, *EMBED, timeout=600)
    make_images(work / "more", n_per_class=30, classes=2, seed=6)
    procs = [subprocess.Popen(embed_cmd(images, out), cwd=REPO, env=child_env(),
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in (work / "more").rglob("*.*"):
        shutil.move(p, images / p.parent.name / ("new-" + p.name))
    codes = [(p.wait(), p.stderr.read()) for p in procs]
    ok = all(c == 0 or (c == 1 and "is being written by pid" in e) for c, e in codes)
    r = run_pairkit("embed", images, "-o", out, *EMBED, timeout=600)
    store = Store.open(out)
    ok &= r.returncode == 0 and store.count == 120 and store.items["source"].is_unique
    print(f"  race: exits {[c for c, _ in codes]}, final rows {store.count} of 120")
    return ok


def readers(work: Path, images: Path) -> bool:
    out = work / "reading"
    first = sorted(images.rglob("*.*"))[:40]
    sub = work / "sub"
    for p in first:
        (sub / p.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(p, sub / p.parent.name / p.name)
    assert run_pairkit("embed", sub, "-o", out, *EMBED).returncode == 0
    # the rest of the images join the same folder (a store takes one image folder only,
    # issue 20), and embed appends them while mine reads
    for p in sorted(images.rglob("*.*"))[40:]:
        (sub / p.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(p, sub / p.parent.name / p.name)
    writer = subprocess.Popen(embed_cmd(sub, out), cwd=REPO, env=child_env(),
                              stderr=subprocess.PIPE, text=True)
    runs, bad = 0, []
    while writer.poll() is None:
        r = run_pairkit("mine", out, "--hard", "-o", work / "p.csv", "--force")
        runs += 1
        if r.returncode != 0:
            bad.append(r.stderr.strip())
    print(f"  readers: {runs} mine runs during the append, {len(bad)} failed {bad[:2]}")
    return not bad and writer.returncode == 0


def flips(work: Path, source: Path, n: int, rng: random.Random) -> bool:
    files = [p.name for p in source.iterdir() if p.is_file() and not p.name.startswith(".")]
    r = run_pairkit("mine", source, "--hard", "-o", work / "f.csv", "--force")
    assert r.returncode == 0, r.stderr  # the undamaged store mines fine
    results = {"refused": 0, "exit 0": 0, "internal error": 0, "not one line": 0}
    for _ in range(n):
        name = rng.choice(files)
        work_store = work / "flip"
        shutil.rmtree(work_store, ignore_errors=True)
        shutil.copytree(source, work_store)
        data = bytearray((work_store / name).read_bytes())
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        (work_store / name).write_bytes(bytes(data))
        r = run_pairkit("mine", work_store, "--hard", "-o", work / "f.csv", "--force")
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        if r.returncode == 0:
            results["exit 0"] += 1
        elif "internal error" in r.stderr:
            results["internal error"] += 1
        elif len(lines) != 1:
            results["not one line"] += 1
        else:
            results["refused"] += 1
    print(f"  flips: {results}")
    return results["refused"] == n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--flips", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="pairkit-probe-"))
    images = work / "images"
    make_images(images, n_per_class=60, classes=4, size=64)
    results = {
        "kill -9 during embed": kills(work, images, args.kills, rng),
        "racing writers": race(work, rng),
        "readers during append": readers(work, images),
        "bit flips": flips(work, work / "clean", args.flips, rng),
    }
    for name, ok in results.items():
        print(f"{name}: {'ok' if ok else 'FAILED'}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
