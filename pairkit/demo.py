"""Sample data for ``pairkit demo``: scikit-learn's handwritten digits as an image folder.

The digits ship inside scikit-learn, so the demo needs no network. Images are
upscaled to RGB, one sub-folder per label; some are planted again as
near-duplicates (re-encoded, resized, brightened) and a few broken files are
added, so every step of the pipeline has something real to find.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pairkit.errors import PairkitError

EDITS = ("reencode", "resize", "brightness")
MARKER = ".pairkit-demo"  # written into DIR: --force may replace a folder that has it
DEMO_EPOCHS = 10  # demo --epochs' default (cli/demo.py): the head's training epochs


@dataclass
class DemoImages:
    images: int = 0
    test_images: int = 0
    duplicates: dict[str, int] = field(default_factory=dict)
    broken: int = 0
    planted: list[tuple[str, str, str]] = field(default_factory=list)  # (copy, original, edit)
    available: int = 0  # digits in the set (a --limit above it takes them all)


def digit_image(pixels_8x8: np.ndarray, size: int, rng: np.random.Generator):
    """One digit (8x8 values 0..16) as an RGB PIL image of size x size, ink colour varied."""
    from PIL import Image, ImageFilter

    grey = (pixels_8x8 / 16.0 * 255).astype(np.uint8)
    img = Image.fromarray(grey, "L").resize((size, size), Image.Resampling.BICUBIC)
    img = img.filter(ImageFilter.GaussianBlur(size / 48))
    ink = rng.integers(0, 90, 3)
    paper = 255 - rng.integers(0, 40, 3)
    a = np.asarray(img, dtype=np.float32)[..., None] / 255.0
    rgb = paper * (1 - a) + ink * a
    return Image.fromarray(rgb.clip(0, 255).astype(np.uint8), "RGB")


def make_demo_images(
    root: str | Path,
    *,
    size: int = 64,
    duplicate_fraction: float = 0.04,
    limit: int | None = None,
    seed: int = 0,
    test_root: str | Path | None = None,
    test_fraction: float = 0.3,
) -> DemoImages:
    """Write the digits as ``root/<label>/digit-NNNN.png``, plus planted copies and broken files.

    With ``test_root``, a random ``test_fraction`` of the digits goes to
    ``test_root/<label>/`` instead (clean: no copies, no broken files), for an
    evaluation on images that training never saw.
    """
    from PIL import Image, ImageEnhance
    from sklearn.datasets import load_digits

    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise PairkitError(f"{root} exists and is not empty; choose a new folder")
    rng = np.random.default_rng(seed)
    digits = load_digits()
    n = len(digits.images) if limit is None else min(limit, len(digits.images))
    out = DemoImages(available=len(digits.images))
    in_test = np.zeros(n, dtype=bool)
    if test_root is not None:
        in_test[rng.choice(n, size=int(round(test_fraction * n)), replace=False)] = True
    originals: list[tuple[Path, int]] = []
    for i in range(n):
        label = int(digits.target[i])
        folder = (Path(test_root) if in_test[i] else root) / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"digit-{i:04d}.png"
        digit_image(digits.images[i], size, rng).save(path)
        if in_test[i]:
            out.test_images += 1
        else:
            originals.append((path, label))
    out.images = len(originals)
    n = len(originals)
    picks = rng.choice(n, size=max(3, int(duplicate_fraction * n)), replace=False)
    for j, idx in enumerate(picks):
        src, _ = originals[int(idx)]
        edit = EDITS[j % len(EDITS)]
        img = Image.open(src).convert("RGB")
        if edit == "reencode":
            dst = src.with_name(src.stem + "-copy.jpg")
            img.save(dst, quality=int(rng.integers(55, 75)))
        elif edit == "resize":
            dst = src.with_name(src.stem + "-small.png")
            s = int(size * rng.uniform(0.6, 0.8))
            img.resize((s, s), Image.Resampling.BILINEAR).save(dst)
        else:
            dst = src.with_name(src.stem + "-bright.png")
            ImageEnhance.Brightness(img).enhance(float(rng.uniform(1.1, 1.2))).save(dst)
        out.duplicates[edit] = out.duplicates.get(edit, 0) + 1
        out.planted.append((dst.relative_to(root).as_posix(), src.relative_to(root).as_posix(),
                            edit))
    broken = root / "0"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "empty.png").write_bytes(b"")
    buf = io.BytesIO()
    digit_image(digits.images[0], size, rng).save(buf, "JPEG")
    (broken / "truncated.jpg").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 3])
    (broken / "notes.png").write_text("this is not an image\n")
    out.broken = 3
    return out


NO_LABEL_RULES = "near-duplicate,mutual-neighbour,cluster"


def demo_steps(d: Path, epochs: int) -> list[tuple[str, list[str]]]:
    """The steps, as printed and run: with --force but for embed (a rerun resumes it), so
    each can be rerun by hand as printed."""
    s = str
    embed = ["--model", "pixels", "--views", "2", "--labels", "folder", "--quiet"]
    steps = [
        ("embed the training images with the weight-free encoder (2 views per image)",
         ["embed", s(d / "images"), "-o", s(d / "store"), *embed]),
        ("embed the held-out test images the same way",
         ["embed", s(d / "test-images"), "-o", s(d / "test-store"), *embed]),
        ("find near-duplicate groups (the planted copies)",
         ["dedup", s(d / "store"), "-o", s(d / "duplicates.csv")]),
        ("mine hard negatives naively: nearest other images, no false-negative filter",
         ["mine", s(d / "store"), "--hard", "--relation", "instance",
          "-o", s(d / "pairs-naive.parquet"), "--stats", s(d / "mine-naive.json")]),
        ("the same, with false-negative rules that never look at labels",
         ["mine", s(d / "store"), "--hard", "--relation", "instance",
          "--filter-false-negatives", "--fn-rules", NO_LABEL_RULES,
          "-o", s(d / "pairs-unlabelled.parquet"), "--stats", s(d / "mine-unlabelled.json")]),
        ("mine training pairs: a random same-label positive, hard negatives, default filter",
         ["mine", s(d / "store"), "--hard", "--relation", "label", "--positive", "random",
          "--filter-false-negatives", "-o", s(d / "pairs.parquet"),
          "--stats", s(d / "mine.json")]),
        ("train a contrastive head on the label-free pairs (their mined positives too)",
         ["train", s(d / "store"), "--pairs", s(d / "pairs-unlabelled.parquet"), "-o",
          s(d / "head"), "--epochs", str(epochs)]),
        ("evaluate on the held-out test images: raw embeddings against the head",
         ["eval", s(d / "store"), "--against", s(d / "test-store"), "--head", s(d / "head"),
          "--compare", "--json", "--plot", s(d / "plots")]),
        ("mine once more keeping the flagged false negatives (for the report)",
         ["mine", s(d / "store"), "--hard", "--relation", "instance",
          "--filter-false-negatives", "--fn-mode", "keep", "-o", s(d / "pairs-flagged.parquet"),
          "--quiet"]),
        ("an HTML report of the flags, the duplicates and the scores (opens from file://)",
         ["report", s(d / "pairs-flagged.parquet"), s(d / "duplicates.csv"),
          s(d / "eval.json"), s(d / "plots"), "-o", s(d / "report")]),
    ]
    return [(title, a if a[0] == "embed" else [*a, "--force"]) for title, a in steps]


def write_planted(path: Path, planted: list[tuple[str, str, str]]) -> None:
    """The planted copies as a CSV (copy, original, edit): what dedup should find."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("copy,original,edit\n")
        for row in planted:
            fh.write(",".join(row) + "\n")


def check_demo_options(images_only: bool, epochs: int) -> None:
    """UsageError for an option the run never reads: ``--epochs`` away from
    :data:`DEMO_EPOCHS` with ``--images-only`` (no head is trained)."""
    from pairkit.errors import UsageError

    if images_only and epochs != DEMO_EPOCHS:
        raise UsageError("--epochs applies to the whole demo, not --images-only (no head is "
                         "trained)")


def prepare_demo_dir(directory: Path, force: bool) -> None:
    """Make ``directory`` ready for a demo run: new or empty is fine; with ``force``, a
    folder an earlier demo wrote (it holds the marker file) is removed first. Any other
    non-empty folder is refused."""
    import shutil

    from pairkit.core.paths import check_folder_output

    check_folder_output(directory, "demo", "its files go in a folder")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise PairkitError(f"{directory} is a file; choose a new folder")
    if directory.is_dir() and any(directory.iterdir()):
        if not force:
            raise PairkitError(f"{directory} exists and is not empty; choose a new folder "
                               "(or --force to replace an earlier demo's folder)")
        if not (directory / MARKER).is_file():
            raise PairkitError(f"{directory} was not written by pairkit demo (no {MARKER}); "
                               "--force replaces only a demo's folder: choose a new folder")
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("written by pairkit demo; --force may replace this folder\n",
                                    encoding="utf-8")


def same_label_share(store: Path, pairs: Path) -> float:
    """Share of mined negatives whose label equals the anchor's (false negatives)."""
    import pandas as pd

    from pairkit.core.store import Store

    labels = Store.open(store).items["label"].to_numpy(dtype=object)
    table = pd.read_parquet(pairs)
    table = table[table["negative_id"] >= 0]  # mined-positive rows carry no negative
    if not len(table):
        return float("nan")
    a = labels[table["anchor_id"].to_numpy()]
    n = labels[table["negative_id"].to_numpy()]
    return float((a == n).mean())


# a difference in held-out kNN top-1 smaller than this is within what seeds move it
GAIN_NOISE = 0.005


def gain_verdict(raw: float | None, head: float | None) -> str:
    """One plain line: did the head beat the raw embeddings on held-out kNN top-1?"""
    if raw is None or head is None:
        return "no held-out kNN top-1 to compare (labels missing)"
    diff = head - raw
    if diff > GAIN_NOISE:
        return (f"the label-free loop helped: held-out kNN top-1 {raw:.3f} -> {head:.3f} "
                f"(+{diff:.3f})")
    if diff < -GAIN_NOISE:
        return (f"no gain: the head is worse than the raw embeddings on held-out kNN top-1 "
                f"({raw:.3f} -> {head:.3f}, {diff:+.3f}); use the raw embeddings")
    # at 3 decimals a difference just under the bound reads as the bound: show the 4th
    shown = f"{diff:+.3f}" if abs(round(diff, 3)) < GAIN_NOISE else f"{diff:+.4f}"
    return (f"no gain: the head ties the raw embeddings on held-out kNN top-1 ({raw:.3f} -> "
            f"{head:.3f}, {shown}, within {GAIN_NOISE})")
