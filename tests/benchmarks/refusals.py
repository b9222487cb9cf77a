"""How fast each command says no (issue 20): every refusal timed in a fresh subprocess.

The goal: a bad path or value is refused before torch/faiss/open_clip load, in under 1 s
(torch alone imports in about 4 s on the shared 2-core machine). Each case runs
``python -m pairkit ...`` ``--repeat`` times; the table gives the median wall time, the exit
code and the one stderr line. ``import torch`` alone is timed the same way, in the same
run, as the yardstick.

Run:  python tests/benchmarks/refusals.py [--repeat 3] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.conftest import make_images, random_store  # noqa: E402
from tests.proc import REPO, child_env  # noqa: E402


def run(args: list[str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    return seconds, proc.returncode, lines[-1] if lines else ""


def setup(work: Path) -> dict[str, str]:
    images = work / "images"
    make_images(images, n_per_class=6, classes=3)
    store = work / "store"
    assert run(["-m", "pairkit", "embed", str(images), "-o", str(store), "--model", "pixels",
                "-q"])[1] == 0
    small = random_store(work / "small", n_sources=20, views=2, dim=16).root
    head = work / "head"
    assert run(["-m", "pairkit", "train", str(small), "-o", str(head), "--relation",
                "instance", "--epochs", "1", "--out-dim", "8", "-q"])[1] == 0
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
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = setup(Path(tmp))
        torch_s = statistics.median(run(["-c", "import torch"])[0] for _ in range(args.repeat))
        rows = [f"| `import torch` (yardstick) | {torch_s:.2f} | | |"]
        for name, argv in cases(paths):
            times, code, line = [], 0, ""
            for _ in range(args.repeat):
                seconds, code, line = run(["-m", "pairkit", *argv])
                times.append(seconds)
            med = statistics.median(times)
            rows.append(f"| {name} | {med:.2f}{' (over 1 s)' if med >= 1 else ''} | {code} | "
                        f"`{line[:110]}` |")
    text = (f"| refusal | seconds (median of {args.repeat}) | exit | message |\n"
            "|---|---|---|---|\n") + "\n".join(rows)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
