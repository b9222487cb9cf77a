"""Benchmark: ``pairkit mine --hard --filter-false-negatives`` on a store with one big source.

A store of N x DIM float32 rows (random unit vectors around 10 class centres, labelled by
class) where the first B rows are one source (a video of B frames, say) and the rest two
views per source is made with ``pairkit import``, then mined with
``pairkit mine STORE --hard -k 10 --filter-false-negatives -q -o X.parquet`` (the default
rules: label, near-duplicate, mutual-neighbour, cluster, and mined positives) under
``/usr/bin/time -v``; the user CPU seconds, wall seconds and peak RSS are printed, one
line per run, and the table's row count. ``--code DIR`` picks the checkout run (its
``PYTHONPATH``), so two checkouts can be compared on the same store; ``--table-out``
keeps the table for a ``.equals`` check.

    .venv/bin/python tests/benchmarks/big_source_mine.py --rows 8000 --big 3000
    .venv/bin/python tests/benchmarks/big_source_mine.py --rows 25000 --big 10000 \
        --code /path/to/other/checkout --timeout 300
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def make_store(rows: int, big: int, dim: int, folder: Path, python: str, code: str) -> Path:
    """Write the .npy and item table and import them; return the store folder."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    centres = rng.standard_normal((10, dim)).astype(np.float32)
    small = (rows - big) // 2
    labels = np.concatenate([np.zeros(big, np.int64), np.repeat(rng.integers(0, 10, small), 2)])
    base = centres[labels] + 1.5 * rng.standard_normal((len(labels), dim)).astype(np.float32)
    # the two views of a small source near each other; the big source's frames near its first
    base[big + 1 :: 2] = base[big::2] + 0.3 * rng.standard_normal((small, dim)).astype(np.float32)
    base[:big] = base[0] + 0.8 * rng.standard_normal((big, dim)).astype(np.float32)
    np.save(folder / "emb.npy", base)
    sources = ["video0"] * big + [f"s{i}" for i in range(small) for _ in range(2)]
    views = list(range(big)) + [v for _ in range(small) for v in range(2)]
    items = pd.DataFrame(
        {
            "path": [f"x/{i:07d}.jpg" for i in range(len(labels))],
            "source": sources,
            "view": views,
            "label": [f"class{c}" for c in labels],
        }
    )
    items.to_parquet(folder / "items.parquet")
    store = folder / "store"
    env = dict(os.environ, PYTHONPATH=code)
    subprocess.run(
        [python, "-m", "pairkit", "import", str(folder / "emb.npy"), "--items",
         str(folder / "items.parquet"), "-o", str(store), "--dtype", "float32", "-q", "--force"],
        check=True, env=env, cwd=folder,  # not a checkout's folder: `-m` would import it
    )
    return store


def timed_mine(store: Path, out: Path, python: str, code: str, timeout: int,
               extra: list[str]) -> dict:
    """Run mine under /usr/bin/time -v; return user s, wall s, peak RSS (GB), exit code."""
    env = dict(os.environ, PYTHONPATH=code, OMP_NUM_THREADS="1")
    cmd = ["/usr/bin/time", "-v", "timeout", str(timeout), python, "-m", "pairkit", "mine",
           str(store), "--hard", "-k", "10", "--filter-false-negatives", "-q", "-o", str(out),
           "--force", *extra]
    # run from the store's folder: `python -m` puts the working folder first on sys.path,
    # so a run started inside another checkout would import that one, not ``code``
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=store.parent)
    err = run.stderr

    def field(name: str) -> str:
        found = re.search(rf"{re.escape(name)}: (.+)", err)
        return found.group(1).strip() if found else "?"

    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    return {
        "rc": run.returncode,
        "user_s": float(field("User time (seconds)")),
        "wall": wall,
        "peak_gb": int(field("Maximum resident set size (kbytes)")) / 1e6,
        "tail": err.strip().splitlines()[:3] if run.returncode else [],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=8000)
    ap.add_argument("--big", type=int, default=3000, help="rows of the one big source")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--code", default=str(Path(__file__).resolve().parents[2]))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--work", default=None, help="folder for the store (kept); default a temp dir")
    ap.add_argument("--table-out", default=None)
    ap.add_argument("extra", nargs="*", help="more mine options (after --)")
    args = ap.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bigsrc-"))
    work.mkdir(parents=True, exist_ok=True)
    store = work / "store"
    if not (store / "manifest.json").exists():
        store = make_store(args.rows, args.big, args.dim, work, args.python, args.code)
    out = Path(args.table_out) if args.table_out else work / "mined.parquet"
    got = timed_mine(store, out, args.python, args.code, args.timeout, args.extra)
    rows = "-"
    if got["rc"] == 0:
        import pandas as pd

        rows = str(len(pd.read_parquet(out)))
    print(f"rows={args.rows} big={args.big} code={args.code} rc={got['rc']} "
          f"user={got['user_s']:.1f}s wall={got['wall']} peak={got['peak_gb']:.2f}GB "
          f"table_rows={rows}")
    for line in got["tail"]:
        print("  ", line)


if __name__ == "__main__":
    main()
