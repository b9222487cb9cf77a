"""What ``embed`` reads: the image files of a folder, tar shards or a dataset, and their labels."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pairkit.core.items import is_missing_text
from pairkit.encode.config import EmbedConfig
from pairkit.encode.images import ImageFile, discover_images
from pairkit.errors import PairkitError


@dataclass
class Sources:
    """What ``embed`` reads: ``root`` (the store's image_root), ``files`` sorted by path,
    ``problems`` (path, reason) found while listing, ``member_labels`` (tar shards' own
    labels by path, None for a folder)."""

    root: Path
    files: list[ImageFile]
    problems: list[tuple[str, str]]
    member_labels: dict[str, str | None] | None = None
    member_label_kind: str = "webdataset"  # what the manifest's ``labels`` says of them


def find_sources(images: Path, image_column: str | None = None,
                 label_column: str | None = None) -> Sources:
    """List an image folder (:func:`discover_images`), tar shards
    (:func:`pairkit.encode.webdataset.discover_webdataset`) or a Hugging Face dataset
    (:func:`pairkit.encode.hf_datasets.discover_hf_dataset`)."""
    from pairkit.encode.hf_datasets import discover_hf_dataset, is_hf_dataset
    from pairkit.encode.webdataset import discover_webdataset, is_webdataset

    if is_hf_dataset(images):
        root, files, problems, labels = discover_hf_dataset(images, image_column,
                                                            label_column)
        return Sources(root, files, problems, labels, "dataset")
    if is_webdataset(images):
        root, files, problems, labels = discover_webdataset(images)
        return Sources(root, files, problems, labels)
    files, problems = discover_images(images)
    return Sources(Path(images), files, problems)


def find_any_sources(images: str | Path, image_column: str | None = None,
                     label_column: str | None = None) -> Sources:
    """:func:`find_sources`, or the image objects under a URL
    (:mod:`pairkit.encode.remote_images`; ``root`` is then the URL)."""
    from pairkit.core.remote import location

    where = location(images)
    if isinstance(where, str):
        from pairkit.encode.webdataset import discover_webdataset, is_webdataset

        if is_webdataset(where):
            root, files, problems, labels = discover_webdataset(where)
            return Sources(root, files, problems, labels)
        from pairkit.encode.remote_images import discover_remote_images

        files, problems = discover_remote_images(where)
        return Sources(where, files, problems)  # type: ignore[arg-type]
    return find_sources(where, image_column, label_column)


def resolve_labels(
    spec: str | None, images: list[ImageFile], root: Path,
    member_labels: dict[str, str | None] | None = None,
) -> tuple[dict[str, str | None], int]:
    """Label per relative path, and how many images got none.

    ``folder``: the first sub-folder name (ImageFolder convention).
    A table path (CSV/parquet/JSONL with ``path`` and ``label``): paths relative to
    the image root, or absolute inside it. None: ``member_labels`` (tar shards' own
    labels, :mod:`pairkit.encode.webdataset`) when given, else none.
    """
    if spec is None and member_labels is not None:
        out = {f.path: member_labels.get(f.path) for f in images}
        missing = sum(v is None for v in out.values())
        return out, 0 if missing == len(out) else missing
    if spec is None:
        return {f.path: None for f in images}, 0
    if spec == "folder":
        out = {f.path: (f.path.split("/", 1)[0] if "/" in f.path else None) for f in images}
        return out, sum(v is None for v in out.values())
    from pairkit.core.tables import read_table

    table = read_table(spec)
    if "path" not in table.columns or "label" not in table.columns:
        raise PairkitError(f"--labels {spec}: the table needs 'path' and 'label' columns")
    mapping: dict[str, str] = {}
    root_abs = root.resolve() if isinstance(root, Path) else None
    for path, label in zip(table["path"].astype(str), table["label"], strict=True):
        p = Path(path)
        if p.is_absolute():
            if root_abs is None:  # images on object storage: paths are keys
                continue
            try:
                # the folders resolved, not the file: a link is its own item
                p = (p.parent.resolve() / p.name).relative_to(root_abs)
            except ValueError:
                continue
        if is_missing_text(label):  # pandas' NA and "" too: no label, as in CSV
            continue
        key, text = _normal(p.as_posix()), str(label)
        if key is None:  # leaves the image root (even to come back in by name)
            continue
        if mapping.setdefault(key, text) != text:
            raise PairkitError(f"--labels {spec}: {key!a} is listed twice, labelled "
                               f"{mapping[key]!a} and {text!a}")
    out = {f.path: mapping.get(_normal(f.path) or f.path) for f in images}
    missing = sum(v is None for v in out.values())
    if images and missing == len(images) and len(table):
        first = str(table["path"].iloc[0])
        raise PairkitError(
            f"--labels {spec}: the table names none of the {len(images)} images (their paths "
            f"are relative to {root}, e.g. {sorted(out)[0]!a}; the table's first is "
            f"{first!a})")
    return out, missing


def _normal(path: str) -> str | None:
    """``path`` (relative, '/'-separated) as ``posixpath.normpath`` spells it (``b/../b/x``,
    ``./b//x``: ``b/x``), the one spelling a labels table's path and an image's are
    matched by; None for a path that leaves the root (a leading ``..`` left) or names it."""
    normal = posixpath.normpath(path)
    if normal in (".", "..") or normal.startswith(("../", "/")):
        return None
    return normal


def labels_kind(cfg: EmbedConfig, sources: Sources, labels: dict[str, str | None]) -> Any:
    """The manifest's ``labels``: folder, file, webdataset (tar members' own) or None."""
    if cfg.labels is not None:
        return cfg.labels if cfg.labels == "folder" else "file"
    if sources.member_labels is not None and any(v is not None for v in labels.values()):
        return sources.member_label_kind
    return None


def same_image_root(store: Path, old_root: str | None, sources: Sources,
                    done: set[str]) -> None:
    """Refuse to add ``sources`` to a store whose rows are relative to another image folder
    (its item paths would point into the wrong folder, and a different image under the same
    relative path would pass for one already embedded). A folder that moved (the old root
    is gone and the new one holds every stored source) is accepted."""
    if isinstance(sources.root, str) or "://" in (old_root or ""):  # object storage
        # one folder with or without its trailing / (the listing strips it)
        if old_root and old_root.rstrip("/") != str(sources.root).rstrip("/"):
            raise PairkitError(f"store {store} holds images of {old_root}, not "
                               f"{sources.root}; embed into another -o, or pass --force to "
                               "replace the store")
        return
    new_root = sources.root.resolve()
    if not old_root or Path(old_root) == new_root:
        return
    moved = not Path(old_root).exists() and done <= {f.path for f in sources.files}
    if not moved:
        raise PairkitError(
            f"store {store} holds images of {old_root}, not {new_root}; embed into another "
            "-o, or pass --force to replace the store")


def check_same_labels(items: Any, labels: dict[str, str | None]) -> None:
    """PairkitError when this run's ``labels`` label an image already in the store
    (``items``, its item table) otherwise than the store does: the rows it appends would
    use another vocabulary (another labels table, another ``--label-column``), one class
    split in two. An image the run gives no label is not counted."""
    import pandas as pd

    if not labels or "label" not in items.columns or not len(items):
        return
    stored = items.drop_duplicates("path").set_index("path")["label"]
    differ = []
    for path, old in stored.items():
        new = labels.get(path)
        old = None if pd.isna(old) else str(old)
        if new is not None and new != old:
            differ.append((path, old, new))
    if differ:
        path, old, new = differ[0]
        raise PairkitError(
            f"{len(differ)} images in the store are labelled otherwise by this run's labels "
            f"(e.g. {path!a}: {old!a} in the store, {new!a} now): the store would mix the "
            "two; pass the labels the store was embedded with, or --force to embed all again")
