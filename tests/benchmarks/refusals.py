"""How fast each command says no (issue 20): every refusal timed in a fresh subprocess.

The goal: a bad path or value is refused before torch/faiss/open_clip load, in under 1 s
(torch alone imports in about 4 s on the shared 2-core machine). Each case runs
``python -m pairkit ...`` ``--repeat`` times; the table gives the median wall time, the exit
code, the heavy modules (torch, faiss, open_clip, timm) it imported (one more run under
``-X importtime``) and the one stderr line. ``import torch`` alone is timed the same way,
in the same run, as the yardstick.

Wall time depends on the machine's load; the child's CPU time (user + system) much less,
so both are given. ``--before CHECKOUT`` runs every case under another checkout too (main
before the fixes), in the same run.

Run:  python tests/benchmarks/refusals.py [--repeat 3] [--before ../main] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.conftest import make_images, random_store  # noqa: E402
from tests.proc import REPO, child_env  # noqa: E402

HEAVY = ("torch", "faiss", "open_clip", "timm")


def run(args: list[str], checkout: Path = REPO,
        imports: bool = False) -> tuple[float, float, int, str, str]:
    """(wall seconds, CPU seconds of the child, exit code, last stderr line, the heavy
    modules it imported: from ``-X importtime`` when ``imports``, a run of its own since
    the import log costs time)."""
    env = child_env()
    env["PYTHONPATH"] = str(checkout)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    flags = ["-X", "importtime"] if imports else []
    proc = subprocess.run([sys.executable, *flags, *args], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    loaded = {x.rsplit("|", 1)[-1].strip() for x in lines if x.startswith("import time:")}
    lines = [x for x in lines if not x.startswith("import time:")]
    heavy = ",".join(m for m in HEAVY if m in loaded) or "none"
    return seconds, cpu, proc.returncode, lines[-1] if lines else "", heavy


def setup(work: Path) -> dict[str, str]:
    images = work / "images"
    make_images(images, n_per_class=6, classes=3)
    store = work / "store"
    assert run(["-m", "pairkit", "embed", str(images), "-o", str(store), "--model", "pixels",
                "-q"])[2] == 0
    small = random_store(work / "small", n_sources=20, views=2, dim=16).root
    head = work / "head"
    assert run(["-m", "pairkit", "train", str(small), "-o", str(head), "--relation",
                "instance", "--epochs", "1", "--out-dim", "8", "-q"])[2] == 0
    return {"images": str(images), "store": str(store), "small": str(small),
            "head": str(head), "work": str(work)}


def cases(p: dict[str, str]) -> list[tuple[str, list[str]]]:
    s, small, head, w = p["store"], p["small"], p["head"], p["work"]
    train = ["train", small, "--relation", "instance"]
    return [
        ("train -o EXISTING", [*train, "-o", head]),
        ("eval --head nosuch", ["eval", small, "--head", w + "/nosuch"]),
        ("project --head STORE", ["project", small, "--head", small, "-o", w + "/p"]),
        ("project -o SAME_AS_INPUT", ["project", small, "--head", head, "-o", small]),
        ("embed --device cuda (no GPU)", ["embed", p["images"], "-o", w + "/e", "--model",
                                          "pixels", "--device", "cuda"]),
        ("train --device cuda (no GPU)", [*train, "-o", w + "/h2", "--device", "cuda"]),
        ("project --device cuda (no GPU)", ["project", small, "--head", head, "-o", w + "/p",
                                            "--device", "cuda"]),
        ("mine --device cuda (no GPU)", ["mine", small, "--hard", "--device", "cuda"]),
        ("dedup --device cuda (no GPU)", ["dedup", small, "--device", "cuda"]),
        ("eval --device cuda (no GPU)", ["eval", small, "--device", "cuda"]),
        ("embed --model nosuch", ["embed", p["images"], "-o", w + "/e", "--model", "nosuch"]),
        ("embed --model ViT-B-32", ["embed", p["images"], "-o", w + "/e", "--model",
                                    "ViT-B-32"]),
        ("embed rerun, nothing to do", ["embed", p["images"], "-o", s, "--model", "pixels"]),
        ("mine --seed -1", ["mine", small, "--hard", "--seed", "-1"]),
        ("mine --min-score nan", ["mine", small, "--hard", "--min-score", "nan"]),
        ("mine -o STORE/manifest.json", ["mine", small, "--hard", "-o",
                                         small + "/manifest.json", "--force"]),
        ("train --out-dim 0", [*train, "-o", w + "/h3", "--out-dim", "0"]),
        ("eval --knn-k 0", ["eval", small, "--knn-k", "0"]),
        ("demo --limit 5", ["demo", w + "/demo", "--limit", "5"]),
        ("mine MISSING", ["mine", w + "/missing", "--hard"]),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", type=Path, help="another checkout (main before the fixes): "
                    "each case also runs there, in the same run")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", help="run only the cases whose name holds this text")
    args = ap.parse_args()
    checkouts = [("after", REPO)] + ([("before", args.before)] if args.before else [])
    with tempfile.TemporaryDirectory() as tmp:
        paths = setup(Path(tmp))
        torch = [run(["-c", "import torch"]) for _ in range(args.repeat)]
        head = "| refusal | " + " | ".join(
            f"{n}: wall s | {n}: CPU s | {n}: exit | {n}: heavy imports"
            for n, _ in checkouts) + " | message (after) |"
        rows = [head, "|---" * (1 + 4 * len(checkouts) + 1) + "|",
                f"| `import torch` (yardstick) | {statistics.median(t[0] for t in torch):.2f} | "
                f"{statistics.median(t[1] for t in torch):.2f} | | torch |" + " | | | |" * (
                    len(checkouts) - 1) + " |"]
        for name, argv in cases(paths):
            if args.only and args.only not in name:
                continue
            cells, message = [], ""
            for label, checkout in checkouts:
                got = [run(["-m", "pairkit", *argv], checkout) for _ in range(args.repeat)]
                wall = statistics.median(g[0] for g in got)
                cpu = statistics.median(g[1] for g in got)
                heavy = run(["-m", "pairkit", *argv], checkout, imports=True)[4]
                cells += [f"{wall:.2f}", f"{cpu:.2f}", str(got[-1][2]), heavy]
                if label == "after":
                    message = got[-1][3]
            rows.append(f"| {name} | " + " | ".join(cells) + f" | `{message[:100]}` |")
    text = "\n".join(rows)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
