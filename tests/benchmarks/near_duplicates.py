"""Near-duplicate detection on a real image set with planted copies.

Renders scikit-learn's digits (8x8 grey, upscaled bicubic to SIZE x SIZE RGB
JPEGs) into a temp folder, plants copies of some of them (re-encode at JPEG
quality 50-70, resize to 0.5-0.75x, brightness +-10-20%, crop 5-10% off the
borders), embeds the folder with ``pairkit embed --model pixels`` and runs
:func:`pairkit.mine.near_duplicates.find_near_duplicates` over a sweep of
thresholds.

Truth: two images are duplicates when they come from the same 8x8 pixel array
(a planted copy and its original, two copies of one original, and the digits
that are pixel-identical in the data set: their renderings are byte-identical).
Every other pair in one group is a false positive, including two different
digits that merely look almost the same.

Per edit type: recall = share of planted copies grouped with their original;
precision = true pairs / grouped pairs, over the pairs that involve a copy of
that edit. ``non-crop`` pools re-encode, resize and brightness; ``all`` is over
every grouped pair (natural look-alikes among the originals included).

Run:  .venv/bin/python tests/benchmarks/near_duplicates.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

EDITS = ("reencode", "resize", "brightness", "crop")
NON_CROP = ("reencode", "resize", "brightness")


def render_set(root: Path, n_originals: int, n_planted: int, size: int, seed: int) -> pd.DataFrame:
    """Write originals and planted copies under ``root``; return truth per file.

    Columns: path, digit (index into load_digits), edit ('original' or an edit), key
    (equivalence class: same value = same 8x8 pixel array).
    """
    from PIL import Image, ImageEnhance
    from sklearn.datasets import load_digits

    rng = np.random.default_rng(seed)
    data = load_digits().images  # (1797, 8, 8) floats 0..16
    chosen = np.sort(rng.choice(len(data), size=min(n_originals, len(data)), replace=False))
    planted = rng.choice(chosen, size=min(n_planted, len(chosen)), replace=False)
    keys = {}
    key_of = []
    for i in range(len(data)):
        b = data[i].astype(np.uint8).tobytes()
        key_of.append(keys.setdefault(b, len(keys)))
    rows = []
    (root / "orig").mkdir(parents=True)
    (root / "planted").mkdir()
    images = {}
    for i in chosen:
        grey = (255 - data[i] * (255.0 / 16.0)).astype(np.uint8)  # dark ink on white
        img = Image.fromarray(grey).resize((size, size), Image.BICUBIC).convert("RGB")
        path = f"orig/d{i:04d}.jpg"
        img.save(root / path, quality=95)
        images[i] = Image.open(root / path).convert("RGB")
        rows.append({"path": path, "digit": int(i), "edit": "original", "key": key_of[i]})
    for i in planted:
        src = images[i]
        w, h = src.size
        for edit in EDITS:
            quality = 90
            if edit == "reencode":
                out = src
                quality = int(rng.integers(50, 71))
            elif edit == "resize":
                s = rng.uniform(0.5, 0.75)
                out = src.resize((max(8, round(w * s)), max(8, round(h * s))), Image.BILINEAR)
            elif edit == "brightness":
                f = 1.0 + rng.choice([-1.0, 1.0]) * rng.uniform(0.10, 0.20)
                out = ImageEnhance.Brightness(src).enhance(f)
            else:
                fx, fy = rng.uniform(0.05, 0.10, size=2)
                cut_w, cut_h = round(w * fx), round(h * fy)
                left, top = int(rng.integers(0, cut_w + 1)), int(rng.integers(0, cut_h + 1))
                out = src.crop((left, top, w - (cut_w - left), h - (cut_h - top)))
            path = f"planted/d{i:04d}-{edit}.jpg"
            out.save(root / path, quality=quality)
            rows.append({"path": path, "digit": int(i), "edit": edit, "key": key_of[i]})
    return pd.DataFrame(rows)


def embed(folder: Path, store: Path) -> float:
    """Run ``pairkit embed --model pixels``; return seconds."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "pairkit", "embed", str(folder), "-o", str(store),
           "--model", "pixels", "--quiet"]
    subprocess.run(cmd, check=True, env={**os.environ, "PAIRKIT_OFFLINE": "1"})
    return time.perf_counter() - t0


def _touching(counts: pd.DataFrame) -> int:
    """Pairs among n members with at least one of the s selected, summed over rows."""
    n, s = counts["n"].to_numpy(), counts["s"].to_numpy()
    return int((n * (n - 1) // 2 - (n - s) * (n - s - 1) // 2).sum())


def score_groups(truth: pd.DataFrame, group: np.ndarray) -> dict[str, float]:
    """Precision/recall per edit from a group id per row of ``truth`` (-1: no group)."""
    df = truth.assign(group=group)
    out: dict[str, float] = {}
    in_groups = df[df["group"] >= 0]
    orig_group = df[df["edit"] == "original"].set_index("digit")["group"]

    def precision(mask: pd.Series) -> tuple[float, int]:
        """Pairs in one group with at least one member selected by ``mask``."""
        sel = in_groups.assign(s=mask[in_groups.index].astype(int))
        t = _touching(sel.groupby("group").agg(n=("s", "size"), s=("s", "sum")))
        true = _touching(sel.groupby(["group", "key"]).agg(n=("s", "size"), s=("s", "sum")))
        return (true / t if t else 1.0), t

    for name, edits in [(e, (e,)) for e in EDITS] + [("non-crop", NON_CROP)]:
        copies = df[df["edit"].isin(edits)]
        og = orig_group.loc[copies["digit"]].to_numpy()
        hit = (copies["group"].to_numpy() >= 0) & (copies["group"].to_numpy() == og)
        out[f"recall_{name}"] = float(hit.mean()) if len(copies) else float("nan")
        out[f"precision_{name}"], out[f"pairs_{name}"] = precision(df["edit"].isin(edits))
    out["precision_all"], out["pairs_all"] = precision(pd.Series(True, index=df.index))
    origs = df["edit"] == "original"
    p_orig, n_orig = precision(origs & ~df["digit"].isin(df.loc[~origs, "digit"]))
    out["lookalike_false_pairs"] = round(n_orig * (1 - p_orig))
    return out


def run_seed(seed: int, args: argparse.Namespace, thresholds: list[float]) -> list[dict]:
    from pairkit.core.store import Store
    from pairkit.mine.near_duplicates import find_near_duplicates

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        truth = render_set(root / "images", args.originals, args.planted, args.size, seed)
        embed_s = embed(root / "images", root / "store")
        store = Store.open(root / "store")
        items = store.items
        truth = truth.set_index("path").loc[items["path"]].reset_index()
        vectors = store.vectors(np.float32)
        hashes = items["file_sha256"].to_numpy(dtype=object, na_value=None)
        rows = []
        for t in thresholds:
            t0 = time.perf_counter()
            res = find_near_duplicates(vectors, t, file_sha256=hashes,
                                       sources=items["source"].to_numpy(dtype=object))
            secs = time.perf_counter() - t0
            m = score_groups(truth, res.item_group)
            rows.append({"seed": seed, "threshold": t, "images": len(items),
                         "seconds": secs, "embed_seconds": embed_s, **m})
    return rows


def f1_all(df: pd.DataFrame) -> pd.Series:
    """F1 of all grouped pairs (precision_all) and recall over every planted copy."""
    recall = df[[f"recall_{e}" for e in EDITS]].mean(axis=1)
    p = df["precision_all"]
    return 2 * p * recall / (p + recall)


def pick_default(df: pd.DataFrame) -> float | None:
    """Among thresholds meeting the goals on every seed (non-crop P>=0.95, R>=0.9),
    the one with the best mean F1 over all pairs and edits (crops included)."""
    by_t = df.assign(f1=f1_all(df)).groupby("threshold").agg(
        p=("precision_non-crop", "min"), r=("recall_non-crop", "min"), f1=("f1", "mean"))
    ok = by_t[(by_t["p"] >= 0.95) & (by_t["r"] >= 0.9)]
    if ok.empty:
        return None
    return float(ok["f1"].idxmax())


def markdown(df: pd.DataFrame) -> str:
    agg = df.assign(f1=f1_all(df)).groupby("threshold").mean(numeric_only=True)
    lo = df.groupby("threshold").min(numeric_only=True)
    cols = ["threshold", "P non-crop (min)", "R non-crop (min)", "R reencode", "R resize",
            "R brightness", "R crop", "P crop", "P all", "F1 all", "look-alike false pairs",
            "dedup s"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for t, r in agg.iterrows():
        lines.append(
            f"| {t:.3f} | {r['precision_non-crop']:.3f} ({lo.loc[t, 'precision_non-crop']:.3f})"
            f" | {r['recall_non-crop']:.3f} ({lo.loc[t, 'recall_non-crop']:.3f})"
            f" | {r['recall_reencode']:.3f} | {r['recall_resize']:.3f}"
            f" | {r['recall_brightness']:.3f} | {r['recall_crop']:.3f}"
            f" | {r['precision_crop']:.3f} | {r['precision_all']:.3f} | {r['f1']:.3f}"
            f" | {r['lookalike_false_pairs']:.1f} | {r['seconds']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default 0,1,2)")
    ap.add_argument("--originals", type=int, default=None, help="digits rendered (max 1797)")
    ap.add_argument("--planted", type=int, default=None, help="originals that get 4 copies")
    ap.add_argument("--size", type=int, default=None, help="rendered image side in pixels")
    ap.add_argument("--thresholds", default="0.80:1.0:0.01", help="start:stop:step")
    ap.add_argument("--out", default=None, help="write all rows as JSON here")
    args = ap.parse_args(argv)
    args.seeds = args.seeds or ("0,1" if args.quick else "0,1,2")
    args.originals = args.originals or (300 if args.quick else 1797)
    args.planted = args.planted or (40 if args.quick else 300)
    args.size = args.size or (64 if args.quick else 96)
    a, b, s = (float(x) for x in args.thresholds.split(":"))
    thresholds = [t for t in (round(float(x), 4) for x in np.arange(a, b + s / 2, s))
                  if 0 < t <= 1]
    rows = []
    for seed in (int(x) for x in args.seeds.split(",")):
        rows += run_seed(seed, args, thresholds)
    df = pd.DataFrame(rows)
    default = pick_default(df)
    print(f"digits {args.originals}, planted {args.planted} x {len(EDITS)} edits, "
          f"{args.size}px, seeds {args.seeds}, images per seed {int(df['images'].iloc[0])}, "
          f"embed {df['embed_seconds'].mean():.1f} s per seed")
    print("mean over seeds (min over seeds in brackets); P = precision, R = recall\n")
    print(markdown(df))
    print(f"\nbest F1 (all edits) among thresholds meeting non-crop P>=0.95 and R>=0.9 on "
          f"every seed: {default}")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "default": default,
                                              "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
