"""Small stores and tables for the report tests, including a hostile-names kit.

The kit's image folder holds files whose names carry markup, quotes, ``&``,
unicode and newlines, plus broken images (empty, truncated, not an image, a
decompression bomb), a symlink that leaves the image root and a store path with
``..``. Its labels and false-negative reasons are hostile too.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

HOSTILE_NAMES = (
    "<script>window.__pwned=1</script>.png",  # a folder '<script>...<' holding 'script>.png'
    "quote\"double'single.png",
    "amp&amp;lt;&#x3C;.png",
    "ünï©ødé ✓ 日本.png",
    "new\nline.png",
    "<!--comment-->.png",
    "<img src=x onerror=window.__pwned=2>.png",
)
HOSTILE_LABELS = (
    "</script><script>window.__pwned=3</script>",
    "\"quoted\" & 'single' &amp;",
    "__proto__",
    "line1\nline2",
)
HOSTILE_REASON = "kreciprocal|<svg onload=window.__pwned=4>|label"
BROKEN = {
    "broken/empty.png": "empty file",
    "broken/truncated.jpg": "truncated or corrupt",
    "broken/notes.png": "not an image",
    "broken/bomb.png": "decompression bomb",
    "escape/outside.png": "outside the image root",  # a symlink to a file outside the root
    "../outside.png": "outside the image root",  # a path that climbs out
}
HOSTILE_TITLE = "report </title><script>window.__pwned=5</script> & \"co\""


def image(path: Path, seed: int, size: tuple[int, int] = (40, 32)) -> None:
    from PIL import Image

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, 3)
    arr = np.clip(base + rng.normal(0, 30, (size[1], size[0], 3)), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


def bomb_png(path: Path, side: int = 40_000) -> None:
    """A PNG header of side x side pixels (far over PIL's limit) with no pixel data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                     + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def image_store(root: Path, paths: list[str], labels: list[str | None], *, dim: int = 8,
                seed: int = 0, image_root: Path | None = None):
    """A store over ``paths`` (one view each) with random vectors; ``image_root`` recorded
    in the manifest as embed does. Returns the opened Store."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(len(paths), dim)).astype(np.float32)
    items = pd.DataFrame({"path": paths, "source": paths, "view": 0, "label": labels})
    extra = {"image_root": str(image_root)} if image_root is not None else None
    return write_store(root, vectors, items, encoder={"name": "random"}, dtype="float32",
                       extra=extra)


def hostile_kit(tmp: Path):
    """(store, triplet table path, dedup table path, image_root, all paths in id order)."""
    images = tmp / "images"
    good = list(HOSTILE_NAMES) + [f"plain/p{i}.png" for i in range(6)]
    for i, name in enumerate(good):
        image(images / name, i)
    (images / "broken").mkdir(parents=True)
    (images / "broken/empty.png").write_bytes(b"")
    from io import BytesIO

    from PIL import Image

    buf = BytesIO()
    Image.new("RGB", (64, 64), (200, 10, 10)).save(buf, "JPEG")
    (images / "broken/truncated.jpg").write_bytes(buf.getvalue()[:120])
    (images / "broken/notes.png").write_text("not an image\n")
    bomb_png(images / "broken/bomb.png")
    image(tmp / "outside.png", 99)
    (images / "escape").mkdir()
    (images / "escape/outside.png").symlink_to(tmp / "outside.png")
    paths = good + list(BROKEN)
    labels = [HOSTILE_LABELS[i % len(HOSTILE_LABELS)] for i in range(len(paths))]
    store = image_store(tmp / "store", paths, labels, image_root=images)
    n = len(paths)
    # every item is an anchor once; its positive is the next item, its negatives the two
    # after; the first negative of every anchor is flagged with a hostile reason
    rows = []
    for a in range(n):
        for r, neg in enumerate(((a + 2) % n, (a + 3) % n)):
            rows.append({"store_id": store.content_id, "anchor_id": a,
                         "positive_id": (a + 1) % n, "negative_id": neg,
                         "anchor_path": paths[a], "positive_path": paths[(a + 1) % n],
                         "negative_path": paths[neg], "pos_score": 0.5 + 0.01 * a,
                         "neg_score": 0.4 - 0.1 * r, "neg_rank": r,
                         "false_negative": r == 0, "fn_reason": HOSTILE_REASON if r == 0 else None})
    pairs = tmp / "pairs.parquet"
    pd.DataFrame(rows).to_parquet(pairs, index=False)
    groups = pd.DataFrame({"group": [0, 0, 0, 1, 1], "id": [0, 1, 2, 3, 4],
                           "path": [paths[i] for i in range(5)],
                           "keep": [True, False, False, True, False],
                           "similarity": [1.0, 0.99, 0.97, 1.0, 0.98],
                           "match": ["keep", "exact", "near", "keep", "near"]})
    dedup = tmp / "duplicates.jsonl"
    groups.to_json(dedup, orient="records", lines=True, force_ascii=False)
    return store, pairs, dedup, images, paths
