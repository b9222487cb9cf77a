"""The page's item list: each image the report shows, once, with its thumbnail.

Views refer to items by their index in this list. With a store, an item is a
store row (path, label and view from the store); without one, the id and path
the table gives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.report.thumbs import make_thumbnails, resolve_under

if TYPE_CHECKING:
    from pairkit.report.stores import StoreInfo

# (item id, path as the table gives it or None) -> index into the page's item list
ItemRef = Callable[[int, Any], int]


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    try:
        import pandas as pd

        if value is pd.NA:
            return None
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    return str(value)


class ItemTable:
    """Rows ``{"id", "path", "label", "view", "thumb", "why"}`` in first-use order."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._index: dict[tuple[Any, ...], int] = {}
        self._roots: dict[int, Path] = {}  # row -> image root its path is under

    def _add(self, key: tuple[Any, ...], row: dict[str, Any], root: Path | None) -> int:
        k = self._index.get(key)
        if k is None:
            k = len(self.rows)
            self._index[key] = k
            self.rows.append({**row, "thumb": None, "why": None})
            if root is not None:
                self._roots[k] = root
        return k

    def ref(self, info: StoreInfo | None) -> ItemRef:
        """The lookup a view calls for each item of a table read against ``info``."""
        if info is None:
            def from_table(item_id: int, path: Any) -> int:
                text = _text(path)
                row = {"id": int(item_id), "path": text, "label": None, "view": None}
                return self._add((None, int(item_id), text), row, None)

            return from_table
        items = info.store.items
        paths = items["path"].to_numpy(dtype=object)
        labels = items["label"].to_numpy(dtype=object, na_value=None)
        views = items["view"].to_numpy()
        local = info.store.local_root
        store_key = str(local.resolve() if local is not None else info.store.root)

        def from_store(item_id: int, _path: Any) -> int:
            i = int(item_id)
            row = {"id": i, "path": _text(paths[i]), "label": _text(labels[i]),
                   "view": int(views[i])}
            return self._add((store_key, i), row, info.image_root)

        return from_store

    def add_thumbnails(self, out_dir: Path, size: int, workers: int | None = None) -> int:
        """Make the thumbnails of every item under an image root; returns how many."""
        real_of: dict[int, Path] = {}
        for k, root in self._roots.items():
            real, problem = resolve_under(root, self.rows[k]["path"] or "")
            if real is None:
                self.rows[k]["why"] = problem
            else:
                real_of[k] = real
        thumbs = make_thumbnails(real_of.values(), out_dir, size, workers)
        for k, real in real_of.items():
            t = thumbs[real]
            self.rows[k]["thumb"], self.rows[k]["why"] = t.file, t.problem
        return sum(t.file is not None for t in thumbs.values())
