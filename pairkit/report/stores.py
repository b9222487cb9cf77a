"""The store behind a table: given (``--store``) or found next to the table.

A pair table carries the ``store_id`` (content id) of the store it was mined
from; dedup groups carry item ids and paths. A store matches a table when the
ids agree, every id is a row of the store and the paths of a sample of rows are
the store's paths for those ids.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pairkit.core.table_items import ReadApart, table_mismatch
from pairkit.errors import PairkitError
from pairkit.report.thumbs import ViewRecipe, view_recipe

if TYPE_CHECKING:
    import pandas as pd

    from pairkit.core.store import Store

MAX_CANDIDATES = 64


@dataclass
class StoreInfo:
    """A store opened for a report; ``image_root`` is resolved, or None with ``note``;
    ``views``: how embed rendered its augmented views (None: show every row's file)."""

    store: Store
    image_root: Path | None
    note: str | None
    views: ViewRecipe | None = None


def open_for_report(path: str | os.PathLike[str]) -> StoreInfo:
    """Open a store (no shard checksums: the report reads only the items) and find its
    image root."""
    from pairkit.core.store import Store

    store = Store.open(path, verify=False)
    root = store.manifest.get("image_root")
    if not root:
        return StoreInfo(store, None, f"store {path} has no image folder (made by import?): "
                         "ids, paths and labels are shown without thumbnails")
    if "://" in str(root):  # images on object storage (embed from s3://...)
        return StoreInfo(store, None, f"image folder {root} of store {path} is on object "
                         "storage, whose images the report does not show: no thumbnails")
    try:
        real = Path(root).resolve()
        usable = real.is_dir()
    except (OSError, RuntimeError):  # closed to this user, a symlink loop (Python < 3.13)
        usable = False
    if not usable:
        return StoreInfo(store, None, f"image folder {root} of store {path} not found: "
                         "no thumbnails")
    return StoreInfo(store, real, None, view_recipe(store.manifest))


def candidates(near: Path | None) -> list[Path]:
    """Store folders next to ``near`` (a table file; None: the working folder): the
    table's folder, its sub-folders, its parent and the parent's sub-folders."""
    base = (near.parent if near is not None else Path.cwd()).resolve()
    out: list[Path] = []
    for folder in (base, base.parent):
        for cand in [folder, *_subfolders(folder)]:
            if cand not in out and _has_manifest(cand):
                out.append(cand)
            if len(out) >= MAX_CANDIDATES:
                return out
    return out


def _has_manifest(folder: Path) -> bool:
    """Whether ``folder`` holds a manifest file; False for a folder this user may not
    search (another user's store, mode 000: issue 20.14)."""
    try:
        return (folder / "manifest.json").is_file()
    except OSError:
        return False


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def find_store(table: pd.DataFrame, fmt: str, near: Path | None,
               apart: ReadApart | None = None) -> StoreInfo | None:
    """The first store next to the table that matches it, or None (``apart``: see
    :func:`~pairkit.core.table_items.table_mismatch`)."""
    from pairkit.errors import StoreError

    for cand in candidates(near):
        try:
            info = open_for_report(cand)
        except (StoreError, PairkitError, OSError):
            continue
        try:
            wrong = table_mismatch(table, fmt, info.store, apart)  # a bad table raises PairkitError
        except StoreError:
            continue  # a damaged store nearby is not this table's (issue 20.14)
        if wrong is None:
            return info
    return None
