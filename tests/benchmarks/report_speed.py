"""Benchmark: time and size of `pairkit report` on a 10,000-triplet table.

Goal (issue 14): a report of 10,000 triplets is built in <= 30 s on 2 cores and is
<= 20 MB.

Data, all generated: N photo-like JPEGs (default 2,000 of 640x480, quality 90) in 10
label folders, 5% of them re-encoded copies of an image of another label; embedded with
``pairkit embed --model pixels --labels folder``, mined with ``pairkit mine --hard -k 5
--relation label --filter-false-negatives --fn-rules near-duplicate,community
--fn-mode keep`` (2,000 anchors x 5 = 10,000 triplets). Then, each as a whole
process (start-up, reading, thumbnails, page), in its own child for its peak RSS:

A. ``pairkit report pairs.parquet -o R``: the default ``--sample 500`` anchors;
B. the same with ``--sample 0``: every anchor of the table;
C. a 1,000,000-row triplet table over the same store (random ids and scores, 5%
   flagged), default sample: the summary reads every row, the page shows 500 anchors.

Sizes: the whole folder, index.html, the thumbnails, and what the thumbnails would
weigh as inline base64 data URIs instead of files.

    .venv/bin/python tests/benchmarks/report_speed.py [--n 2000] [--quick] [--out r.json]
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

PAIRKIT = [sys.executable, "-m", "pairkit"]
LABELS = 10


def make_jpegs(root: Path, n: int, size: tuple[int, int], seed: int = 0) -> None:
    """Photo-like smooth random JPEGs (quality 90), ``n // LABELS`` per label folder; 5%
    are re-encoded copies of another label's image."""
    from PIL import Image, ImageFilter

    rng = np.random.default_rng(seed)
    previous = None
    for i in range(n):
        folder = root / f"label{i % LABELS}"
        folder.mkdir(parents=True, exist_ok=True)
        if i % 20 == 19 and previous is not None:
            # every 20th image re-encodes the one before into another label's folder: a
            # near-duplicate among the candidate negatives, for the rules to flag
            previous.save(folder / f"img{i:05d}.jpg", quality=70)
            continue
        small = rng.integers(0, 255, (size[1] // 16, size[0] // 16, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize(size, Image.Resampling.BILINEAR)
        previous = img.filter(ImageFilter.GaussianBlur(1))
        previous.save(folder / f"img{i:05d}.jpg", quality=90)


def run(cmd: list[str]) -> dict:
    """Run ``cmd`` in a child that reports its own wall time and peak RSS."""
    probe = (
        "import json, resource, subprocess, sys, time\n"
        "t0 = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t0\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'rc': p.returncode, 'wall_s': wall, 'peak_rss_mb': rss / 1024,"
        " 'stderr': p.stderr[-2000:]}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True,
                         check=True)
    result = json.loads(out.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{result['stderr']}")
    return result


def folder_sizes(folder: Path) -> dict:
    files = [p for p in folder.rglob("*") if p.is_file()]
    thumbs = [p for p in files if p.parent.name == "t"]
    thumb_bytes = sum(p.stat().st_size for p in thumbs)
    return {
        "total_mb": sum(p.stat().st_size for p in files) / 1e6,
        "disk_mb": sum(p.stat().st_blocks * 512 for p in files) / 1e6,
        "index_mb": (folder / "index.html").stat().st_size / 1e6,
        "thumbnails": len(thumbs),
        "thumb_mb": thumb_bytes / 1e6,
        "thumb_mean_kb": thumb_bytes / max(1, len(thumbs)) / 1e3,
        # the same bytes as data:image/webp;base64,... strings inside index.html
        "inline_thumb_mb": sum(4 * ((p.stat().st_size + 2) // 3) + 23 for p in thumbs) / 1e6,
    }


def big_table(store: Path, rows: int, out: Path, seed: int = 0) -> None:
    import pandas as pd

    from pairkit.core.store import Store

    st = Store.open(store, verify=False)
    paths = st.items["path"].to_numpy(dtype=object)
    rng = np.random.default_rng(seed)
    anchors = rows // 5
    a = np.repeat(rng.integers(0, st.count, anchors), 5)
    flagged = rng.random(rows) < 0.05
    neg = rng.integers(0, st.count, rows)
    pd.DataFrame({
        "store_id": st.content_id, "anchor_id": a, "positive_id": (a + 1) % st.count,
        "negative_id": neg, "anchor_path": paths[a], "positive_path": paths[(a + 1) % st.count],
        "negative_path": paths[neg], "pos_score": rng.uniform(0.3, 0.9, rows).astype(np.float32),
        "neg_score": rng.uniform(0.0, 0.8, rows).astype(np.float32),
        "neg_rank": np.tile(np.arange(5), anchors), "false_negative": flagged,
        "fn_reason": np.where(flagged, "near_duplicate|kreciprocal", None),
    }).to_parquet(out, index=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="images (= anchors; 5 negatives each)")
    ap.add_argument("--image-size", default="640x480")
    ap.add_argument("--big-rows", type=int, default=1_000_000, help="rows of table C (0: skip)")
    ap.add_argument("--quick", action="store_true", help="400 images, 100,000-row table C")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    n = 400 if args.quick else args.n
    big = 100_000 if args.quick else args.big_rows
    w, h = (int(v) for v in args.image_size.split("x"))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    os.environ.update(env)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        t0 = time.perf_counter()
        make_jpegs(t / "images", n, (w, h))
        subprocess.run([*PAIRKIT, "embed", str(t / "images"), "-o", str(t / "store"), "--model",
                        "pixels", "--labels", "folder", "--quiet"], check=True)
        subprocess.run([*PAIRKIT, "mine", str(t / "store"), "--hard", "-k", "5", "--relation",
                        "label", "--positive", "random", "--filter-false-negatives",
                        "--fn-rules", "near-duplicate,community", "--fn-mode", "keep", "-q",
                        "-o", str(t / "pairs.parquet")], check=True)
        import pandas as pd

        table = pd.read_parquet(t / "pairs.parquet")
        print(f"data: {n} images, {len(table):,} triplets, {int(table['false_negative'].sum()):,}"
              f" flagged ({time.perf_counter() - t0:.0f} s to make)", file=sys.stderr)
        rows = []
        for name, extra in (("A: --sample 500 (default)", []), ("B: --sample 0 (all)",
                                                                 ["--sample", "0"])):
            out = t / f"rep-{len(rows)}"
            r = run([*PAIRKIT, "report", str(t / "pairs.parquet"), "-o", str(out), *extra])
            rows.append({"case": name, "rows": len(table), **r, **folder_sizes(out)})
        if big:
            big_table(t / "store", big, t / "big.parquet")
            out = t / "rep-big"
            r = run([*PAIRKIT, "report", str(t / "big.parquet"), "-o", str(out)])
            rows.append({"case": f"C: {big:,}-row table, --sample 500", "rows": big, **r,
                         **folder_sizes(out)})
    result = {"images": n, "image_size": args.image_size, "cpus": os.cpu_count(),
              "machine": platform.machine(), "python": platform.python_version(),
              "goal": "10,000 triplets: <= 30 s, <= 20 MB", "runs": rows}
    print("| case | rows | wall s | peak RSS MB | folder MB | index.html MB | thumbnails "
          "| thumbnail MB (mean KB) | as inline data URIs MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['rows']:,} | {r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} | "
              f"{r['total_mb']:.2f} | {r['index_mb']:.2f} | {r['thumbnails']:,} | "
              f"{r['thumb_mb']:.2f} ({r['thumb_mean_kb']:.1f}) | {r['inline_thumb_mb']:.2f} |")
    if args.out:
        for r in rows:
            r.pop("stderr", None)
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
