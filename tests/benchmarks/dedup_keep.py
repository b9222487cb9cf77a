"""Which no-reference signal picks the original of a planted copy (dedup --keep best).

Renders originals (three sets: scikit-learn digits drawn at 64 px as the demo draws them,
Fashion-MNIST garments at 84 px, and 1/f noise textures at their native 64 px, i.e. with
detail up to the pixel), plants one copy of each kind per original and asks, for every
(original, copy) pair, whether a rule ranks the original above the copy:

- reencode: JPEG quality 55-75;   downup: 7/8 size and back (bilinear), PNG;
- blur: Gaussian radius 0.8, PNG;  upscale: 1.5x bicubic, PNG;
- downscale: 0.6-0.8x bilinear, PNG;  brighten: +15 %, PNG.

Originals are PNG (and, in a second pass, JPEG quality 95: then "lossless" is a copy's
property, not the original's). Signals from :mod:`pairkit.mine.keep_best`; rules:
``old`` (pixels, then bytes: the rule before issue 20), each signal alone, and ``best``
(the per-file rule) and the rule dedup uses now: that key, then the resized-copy comparison
of :mod:`pairkit.mine.keep_resized` on the pair. A tie counts as wrong (path order then
decides). Results: docs/dedup.md#how---keep-best-chooses.

``--demo``: the demo's own folder instead (pairkit.demo.make_demo_images: 1,797 digits, 4 %
planted copies), embedded with the pixels encoder and deduplicated with ``pairkit dedup``
(each checkout given with ``--checkout``, in the same run): of the planted pairs that land
in one group, how many keep the original, by kind of copy.

Run:  python tests/benchmarks/dedup_keep.py [--n 60] [--demo [--checkout ../main]]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pairkit.mine.keep_best import best_key, copy_facts  # noqa: E402
from pairkit.mine.keep_resized import resized_keeper  # noqa: E402

EDITS = ("reencode", "downup", "blur", "upscale", "downscale", "brighten")
FASHION = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")


def originals(kind: str, n: int, rng: np.random.Generator) -> list:
    from PIL import Image

    from pairkit.demo import digit_image

    if kind == "digits":
        from sklearn.datasets import load_digits

        data = load_digits().images
        return [digit_image(data[i], 64, rng) for i in rng.choice(len(data), n, replace=False)]
    if kind == "fashion":
        with gzip.open(FASHION) as fh:
            raw = np.frombuffer(fh.read(), np.uint8, offset=16).reshape(-1, 28, 28)
        pick = rng.choice(len(raw), n, replace=False)
        return [Image.fromarray(255 - raw[i]).resize((84, 84), Image.Resampling.BICUBIC)
                .convert("RGB") for i in pick]
    out = []  # 1/f noise: detail at every scale up to the pixel
    fy, fx = np.meshgrid(np.fft.fftfreq(64), np.fft.fftfreq(64), indexing="ij")
    f = np.hypot(fx, fy)
    f[0, 0] = 1
    for _ in range(n):
        chans = []
        for _c in range(3):
            spec = (rng.normal(size=(64, 64)) + 1j * rng.normal(size=(64, 64))) / f
            img = np.real(np.fft.ifft2(spec))
            chans.append((img - img.mean()) / (4 * img.std()) * 255 + 128)
        out.append(Image.fromarray(np.clip(np.stack(chans, -1), 0, 255).astype(np.uint8)))
    return out


def plant(img, edit: str, folder: Path, stem: str, rng: np.random.Generator) -> Path:
    from PIL import Image, ImageEnhance, ImageFilter

    w, h = img.size
    if edit == "reencode":
        p = folder / f"{stem}-{edit}.jpg"
        img.save(p, quality=int(rng.integers(55, 76)))
        return p
    if edit == "downup":
        out = img.resize((w * 7 // 8, h * 7 // 8), Image.Resampling.BILINEAR).resize(
            (w, h), Image.Resampling.BILINEAR)
    elif edit == "blur":
        out = img.filter(ImageFilter.GaussianBlur(0.8))
    elif edit == "upscale":
        out = img.resize((w * 3 // 2, h * 3 // 2), Image.Resampling.BICUBIC)
    elif edit == "downscale":  # as the demo plants its "resize" copies
        f = rng.uniform(0.6, 0.8)
        out = img.resize((round(w * f), round(h * f)), Image.Resampling.BILINEAR)
    else:
        out = ImageEnhance.Brightness(img).enhance(1.15)
    p = folder / f"{stem}-{edit}.png"
    out.save(p)
    return p


RULES = {
    "old (pixels, then bytes)": lambda f: (f.pixels, f.bytes),
    "file bytes": lambda f: (f.bytes,),
    "lossless": lambda f: (not f.lossy,),
    "JPEG quality": lambda f: (f.quality,),
    "sharpness": lambda f: (f.sharpness,),
    "effective pixels (native scale)": lambda f: (f.effective_pixels,),
    "fewer clipped": lambda f: (-f.clipped,),
    "quality band, sharpness": lambda f: (f.quality_band, f.sharpness),
    "quality band, sharpness x pixels": lambda f: (f.quality_band, f.sharpness * f.pixels),
    "quality band, sharpness x pixels^1.5": lambda f: (f.quality_band,
                                                        f.sharpness * f.pixels ** 1.5),
    "quality band, log2 sharpness + 1.75 log2 pixels - 8 clipped": lambda f: (
        f.quality_band, np.log2(max(f.sharpness, 1e-12)) + 1.75 * np.log2(f.pixels)
        - 8 * f.clipped),
    "quality band, log2 sharpness + 2 log2 pixels - 8 clipped": lambda f: (
        f.quality_band, np.log2(max(f.sharpness, 1e-12)) + 2 * np.log2(f.pixels)
        - 8 * f.clipped),
    "quality band, detail with 12 x clipped": lambda f: (f.quality_band, f.detail - 4 * f.clipped),
    "best, per file (quality band, detail)": best_key,
}
PAIR_RULE = "best (dedup now: per file, then resized copies compared)"


def pair_rule(fo, fc, op: Path, cp: Path) -> bool:  # noqa: ANN001
    """Whether dedup's rule keeps the original of the pair (original, copy): the per-file
    key, then :func:`pairkit.mine.keep_resized.resized_keeper` on the two-member group."""
    kept = 0 if best_key(fo) > best_key(fc) else 1
    facts, files = (fo, fc), (op, cp)
    new, _ = resized_keeper(kept, [1 - kept], lambda i: facts[i].pixels, lambda i: files[i])
    return new == 0


def demo(checkouts: list[Path]) -> None:
    """The demo folder's planted pairs under ``pairkit dedup`` of each checkout."""
    import io
    import json
    import os
    import subprocess

    import pandas as pd

    from pairkit.demo import make_demo_images

    with tempfile.TemporaryDirectory() as tmp:
        images = Path(tmp) / "images"
        made = make_demo_images(images)
        env = dict(os.environ, PYTHONPATH=str(checkouts[0]), OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-m", "pairkit", "embed", str(images), "-o",
                        str(Path(tmp) / "store"), "--model", "pixels", "-q"], env=env,
                       check=True)
        for checkout in checkouts:
            env["PYTHONPATH"] = str(checkout)
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "pairkit", "dedup",
                                  str(Path(tmp) / "store"), "-q"], env=env, check=True,
                                 capture_output=True, text=True).stdout
            seconds = time.perf_counter() - t0
            t = pd.read_json(io.StringIO(out), lines=True)
            group = dict(zip(t["path"], t["group"], strict=True))
            kept = set(t.loc[t["keep"], "path"])
            tally: dict[str, list[int]] = {}
            for copy, original, edit in made.planted:
                if copy in group and group.get(original) == group[copy]:
                    tally.setdefault(edit, []).append(int(original in kept))
            cells = {e: f"{sum(v)} of {len(v)}" for e, v in sorted(tally.items())}
            total = sum(sum(v) for v in tally.values())
            print(json.dumps({"checkout": str(checkout), "dedup_seconds": round(seconds, 1),
                              "originals_kept": f"{total} of "
                              f"{sum(len(v) for v in tally.values())}", **cells}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60, help="originals per set")
    ap.add_argument("--seed", type=int, default=1, help="the weights were chosen on seed 0")
    ap.add_argument("--demo", action="store_true", help="the demo folder (see above)")
    ap.add_argument("--checkout", type=Path, action="append", default=None,
                    help="with --demo: also run dedup of this checkout (repeatable)")
    args = ap.parse_args()
    if args.demo:
        demo([Path(__file__).resolve().parents[2], *(args.checkout or [])])
        return
    rng = np.random.default_rng(args.seed)
    right: dict[tuple[str, str, str], list[bool]] = {}
    t0 = time.perf_counter()
    n_facts = 0
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("digits", "fashion", "noise"):
            for orig_fmt in ("png", "jpg"):
                folder = Path(tmp) / f"{kind}-{orig_fmt}"
                folder.mkdir()
                for k, img in enumerate(originals(kind, args.n, rng)):
                    op = folder / f"o{k}.{orig_fmt}"
                    img.save(op, **({"quality": 95} if orig_fmt == "jpg" else {}))
                    img = __import__("PIL.Image").Image.open(op).convert("RGB")
                    fo = copy_facts(op, native=True)
                    n_facts += 1
                    for edit in EDITS:
                        cp = plant(img, edit, folder, f"o{k}", rng)
                        fc = copy_facts(cp, native=True)
                        n_facts += 1
                        for name, key in RULES.items():
                            right.setdefault((name, edit, orig_fmt), []).append(
                                key(fo) > key(fc))
                        right.setdefault((PAIR_RULE, edit, orig_fmt), []).append(
                            pair_rule(fo, fc, op, cp))
    seconds = time.perf_counter() - t0
    print(f"seed {args.seed}: {args.n} originals x 3 sets x 2 original formats x "
          f"{len(EDITS)} copies; {n_facts} files judged in {seconds:.1f} s (with rendering)")
    for orig_fmt in ("png", "jpg"):
        print(f"\noriginals saved as {orig_fmt.upper()}: share of pairs where the rule keeps "
              "the original (ties count as wrong)")
        print("| rule | " + " | ".join(EDITS) + " | all |")
        print("|---" * (len(EDITS) + 2) + "|")
        for name in [*RULES, PAIR_RULE]:
            cells = [np.mean(right[(name, e, orig_fmt)]) for e in EDITS]
            total = np.mean([x for e in EDITS for x in right[(name, e, orig_fmt)]])
            print(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {total:.2f} |")


if __name__ == "__main__":
    main()
