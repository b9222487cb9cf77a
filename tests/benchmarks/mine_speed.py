"""Benchmark: `pairkit mine --hard` against a bare FAISS search and sentence-transformers.

A store of N L2-normalised 512-d vectors (synthetic clustered data, two views per
source, float32) is mined with ``--num-negatives 5``; in one run on the same vectors:

1. ``pairkit mine STORE --hard -k 5`` as a whole process (start-up, store check,
   index, search, selection, parquet output),
2. a bare FAISS exact search of the same k (load the .npy, IndexFlatIP, search),
   the floor,
3. sentence-transformers' ``mine_hard_negatives(use_faiss=True)`` fed the same
   vectors, if it is installed (it is not installed by pairkit; reported as such).

Part A: N = 20,000 with the exact index. Part B: N = 200,000 with ``--index auto``
(approximate above the size threshold) against ``--index flat``: recall@k of the
mined negatives against the exact run, speedup and peak memory.
``--quick``: N = 5,000 (A) and 20,000 (B); B then passes ``--exact-max-rows`` below
N so that ``auto`` picks the approximate index as it would at full size.

Every measurement runs in a child process so that its peak RSS (getrusage of the
child) is its own.

    .venv/bin/python tests/benchmarks/mine_speed.py --quick [--out result.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PAIRKIT = [sys.executable, "-m", "pairkit"]
K = 5


def make_vectors(n: int, dim: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """n/2 sources x 2 views of clustered unit vectors (about 50 sources per cluster)."""
    rng = np.random.default_rng(seed)
    n_src = n // 2
    centres = rng.standard_normal((max(1, n_src // 50), dim), dtype=np.float32)
    out = np.empty((n_src * 2, dim), dtype=np.float32)
    step = 20_000
    for s in range(0, n_src, step):
        m = min(step, n_src - s)
        base = centres[rng.integers(0, len(centres), m)] + 0.7 * rng.standard_normal(
            (m, dim), dtype=np.float32)
        for v in range(2):
            out[2 * s + v : 2 * (s + m) : 2] = base + 0.3 * rng.standard_normal(
                (m, dim), dtype=np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    sources = [f"s{i}.jpg" for i in range(n_src) for _ in range(2)]
    return out, sources


def make_store(path: Path, vectors: np.ndarray, sources: list[str]) -> None:
    import pandas as pd

    from pairkit.core.store_writer import write_store

    items = pd.DataFrame({"path": sources, "source": sources,
                          "view": np.tile([0, 1], len(sources) // 2)})
    write_store(path, vectors, items, encoder={"name": "bench"}, dtype="float32", force=True)
    np.save(path.parent / f"{path.name}.npy", vectors)


def measure(cmd: list[str]) -> dict:
    """Run ``cmd`` in a child (through this script, so getrusage sees only it)."""
    proc = subprocess.run([sys.executable, __file__, "--_child", json.dumps(cmd)],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child(cmd: list[str]) -> None:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit(1)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    out = {"seconds": round(wall, 3), "peak_rss_mb": round(peak, 1)}
    with contextlib.suppress(ValueError, IndexError):
        out.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(json.dumps(out))


def bare_faiss(npy: str, k: int) -> None:
    """The floor: load the vectors, exact IP index, search every row for k + 2
    (self and the other view come back too), as one child process."""
    import faiss

    t0 = time.perf_counter()
    x = np.load(npy)
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    index.search(x, k + 2)
    print(json.dumps({"inner_seconds": round(time.perf_counter() - t0, 3), "k": k + 2}))


def st_mine(npy: str, k: int) -> None:
    """sentence-transformers' mine_hard_negatives(use_faiss=True) on the same vectors."""
    import importlib.util

    if importlib.util.find_spec("sentence_transformers") is None:
        print(json.dumps({"status": "not installed"}))
        return
    # fed precomputed vectors through a model that returns them (no encoding cost)
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer  # noqa: F401
    from sentence_transformers.util import mine_hard_negatives

    x = np.load(npy)
    texts = [str(i) for i in range(len(x))]

    class Fixed:
        """Stands in for a SentenceTransformer: text i -> the stored vector i."""

        device = torch.device("cpu")

        def encode(self, sentences, **kw):  # noqa: ANN001, ANN003, ANN201
            out = x[[int(s) for s in sentences]]
            return torch.from_numpy(out) if kw.get("convert_to_tensor") else out

        encode_query = encode
        encode_document = encode

        def get_embedding_dimension(self) -> int:
            return int(x.shape[1])

        def similarity(self, a, b):  # noqa: ANN001, ANN201
            return torch.as_tensor(a) @ torch.as_tensor(b).T

        def similarity_pairwise(self, a, b):  # noqa: ANN001, ANN201
            return (torch.as_tensor(a) * torch.as_tensor(b)).sum(-1)

    import faiss

    if faiss.get_num_gpus() == 0:
        # With the faiss-gpu wheel on a CPU-only machine, index_cpu_to_all_gpus returns an
        # index with no shards whose search segfaults; sentence-transformers only falls back
        # to the CPU index when the call raises, as it does with faiss-cpu.
        def no_gpus(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            raise RuntimeError("no GPU visible")

        faiss.index_cpu_to_all_gpus = no_gpus
    ds = Dataset.from_dict({"anchor": texts[0::2], "positive": texts[1::2]})
    t0 = time.perf_counter()
    mine_hard_negatives(ds, Fixed(), num_negatives=k, use_faiss=True, verbose=False)
    print(json.dumps({"inner_seconds": round(time.perf_counter() - t0, 3)}))


def negatives(path: Path) -> dict[int, set[int]]:
    import pandas as pd

    df = pd.read_parquet(path, columns=["anchor_id", "negative_id"])
    return {a: set(g) for a, g in df.groupby("anchor_id")["negative_id"]}


def run(args: argparse.Namespace) -> dict:
    n_exact, n_approx = (5_000, 20_000) if args.quick else (args.n_exact, args.n_approx)
    work = Path(tempfile.mkdtemp(prefix="pairkit-bench-mine-"))
    result: dict = {"quick": args.quick, "dim": args.dim, "k": K, "cpus": os.cpu_count(),
                    "platform": platform.platform(), "parts": {}}
    try:
        # A: exact; B: auto vs exact
        result["parts"]["exact"] = (part_exact(work, n_exact, args.dim)
                                    if "exact" in args.parts else None)
        result["parts"]["auto"] = (part_auto(work, n_approx, args.dim, args.quick)
                                   if "auto" in args.parts else None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def part_exact(work: Path, n_exact: int, dim: int) -> dict:
    store = work / "a"
    make_store(store, *make_vectors(n_exact, dim, 0))
    a = {"n": n_exact}
    a["pairkit"] = measure([*PAIRKIT, "mine", str(store), "--hard", "-k", str(K), "--index",
                            "flat", "-o", str(work / "a.parquet"), "-q", "--force",
                            "--stats", str(work / "a.json")])
    a["faiss"] = measure([sys.executable, __file__, "--_bare", f"{store}.npy"])
    a["sentence_transformers"] = measure([sys.executable, __file__, "--_st", f"{store}.npy"])
    if (work / "a.json").exists():
        s = json.loads((work / "a.json").read_text())
        a["pairkit"]["k_initial"] = s["k_initial"]
        a["pairkit"]["mine_seconds"] = s["seconds"]["mine"]
    return a


def part_auto(work: Path, n_approx: int, dim: int, quick: bool) -> dict:
    store = work / "b"
    make_store(store, *make_vectors(n_approx, dim, 1))
    b: dict = {"n": n_approx}
    extra = ["--exact-max-rows", str(n_approx // 2)] if quick else []
    b["auto"] = measure([*PAIRKIT, "mine", str(store), "--hard", "-k", str(K), "--index",
                         "auto", *extra, "-o", str(work / "b_auto.parquet"), "-q",
                         "--force", "--stats", str(work / "b_auto.json")])
    b["exact"] = measure([*PAIRKIT, "mine", str(store), "--hard", "-k", str(K), "--index",
                          "flat", "-o", str(work / "b_flat.parquet"), "-q", "--force"])
    if (work / "b_auto.json").exists():
        b["auto"]["index"] = json.loads((work / "b_auto.json").read_text())["index"]
    if (work / "b_auto.parquet").exists() and (work / "b_flat.parquet").exists():
        got, ref = negatives(work / "b_auto.parquet"), negatives(work / "b_flat.parquet")
        b["recall_at_k"] = round(float(np.mean(
            [len(got.get(a_, set()) & r) / len(r) for a_, r in ref.items()])), 4)
        b["speedup"] = round(b["exact"]["seconds"] / b["auto"]["seconds"], 2)
    return b


def table(r: dict) -> str:
    a, b = r["parts"]["exact"], r["parts"]["auto"]
    lines = [f"k = {r['k']}, dim = {r['dim']}, {r['cpus']} CPUs, quick = {r['quick']}"]

    def cell(m: dict, key: str = "seconds") -> str:
        if "error" in m:
            return f"error: {m['error']}"
        if m.get("status"):
            return m["status"]
        return f"{m[key]:.2f}"

    if a is not None:
        lines += table_exact(a, cell)
    if b is not None:
        lines += table_auto(b, cell, r["k"])
    return "\n".join(lines)


def table_exact(a: dict, cell) -> list[str]:  # noqa: ANN001
    lines = [
        "",
        f"| A: N = {a['n']:,}, exact | wall s (whole process) | peak RSS MB |",
        "|---|---:|---:|",
        f"| pairkit mine --hard --index flat | {cell(a['pairkit'])} | "
        f"{a['pairkit'].get('peak_rss_mb', '-')} |",
        f"| bare FAISS IndexFlatIP search (k={K + 2}) | {cell(a['faiss'])} | "
        f"{a['faiss'].get('peak_rss_mb', '-')} |",
        f"| sentence-transformers mine_hard_negatives(use_faiss=True) | "
        f"{cell(a['sentence_transformers'])} | "
        f"{a['sentence_transformers'].get('peak_rss_mb', '-')} |",
    ]
    if "error" not in a["pairkit"] and "error" not in a["faiss"]:
        lines.append(f"\npairkit / bare FAISS: "
                     f"{a['pairkit']['seconds'] / a['faiss']['seconds']:.2f}x")
    return lines


def table_auto(b: dict, cell, k: int) -> list[str]:  # noqa: ANN001
    return [
        "",
        f"| B: N = {b['n']:,} | wall s | peak RSS MB | index |",
        "|---|---:|---:|---|",
        f"| pairkit mine --index auto | {cell(b['auto'])} | {b['auto'].get('peak_rss_mb', '-')}"
        f" | {b['auto'].get('index', '-')} |",
        f"| pairkit mine --index flat | {cell(b['exact'])} | "
        f"{b['exact'].get('peak_rss_mb', '-')} | exact |",
        "",
        f"recall@{k} of auto's negatives vs exact: {b.get('recall_at_k', '-')}; "
        f"speedup: {b.get('speedup', '-')}x",
    ]


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--_child":
        _child(json.loads(sys.argv[2]))
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--_bare":
        bare_faiss(sys.argv[2], K)
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--_st":
        st_mine(sys.argv[2], K)
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="N = 5,000 / 20,000 (smoke run)")
    p.add_argument("--n-exact", type=int, default=20_000)
    p.add_argument("--n-approx", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--parts", default="exact,auto",
                   help="which parts to run: exact (A), auto (B), or both (default)")
    p.add_argument("--out", type=Path, help="write the results as JSON")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    r = run(args)
    print(table(r))
    if args.out:
        args.out.write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
