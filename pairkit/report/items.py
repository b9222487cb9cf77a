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

from pairkit.report.thumbs import ColumnRow, ViewOf, ViewRecipe, make_thumbnails, resolve_under

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
    """Rows ``{"id", "path", "label", "view", "view_thumb", "thumb", "why"}`` in first-use
    order; ``view_thumb``: the thumbnail shows the row's augmented view, not its file."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._index: dict[tuple[Any, ...], int] = {}
        self._roots: dict[int, Path] = {}  # row -> image root its path is under
        self._views: dict[int, tuple[str, int, ViewRecipe]] = {}  # row -> its view's recipe
        self._columns: dict[int, str] = {}  # row -> its dataset store's --image-column

    def _add(self, key: tuple[Any, ...], row: dict[str, Any], root: Path | None,
             view: tuple[str, int, ViewRecipe] | None = None, column: str | None = None
             ) -> int:
        k = self._index.get(key)
        if k is None:
            k = len(self.rows)
            self._index[key] = k
            self.rows.append({**row, "view_thumb": view is not None and root is not None,
                              "thumb": None, "why": None})
            if root is not None:
                self._roots[k] = root
                if view is not None:
                    self._views[k] = view
                if column:
                    self._columns[k] = column
        return k

    def ref(self, info: StoreInfo | None) -> ItemRef:
        """The lookup a view calls for each item of a table read against ``info``."""
        if info is None:
            def from_table(item_id: int, path: Any) -> int:
                text = _text(path)
                row = {"id": int(item_id), "path": text, "label": None, "view": None}
                return self._add((None, int(item_id), text), row, None)

            return from_table
        from pairkit.encode.item_images import image_column_of

        column = image_column_of(info.store)
        items = info.store.items
        paths = items["path"].to_numpy(dtype=object)
        labels = items["label"].to_numpy(dtype=object, na_value=None)
        views = items["view"].to_numpy()
        sources = items["source"].to_numpy(dtype=object)
        recipe = info.views
        local = info.store.local_root
        store_key = str(local.resolve() if local is not None else info.store.root)

        def from_store(item_id: int, _path: Any) -> int:
            i = int(item_id)
            row = {"id": i, "path": _text(paths[i]), "label": _text(labels[i]),
                   "view": int(views[i])}
            view = ((str(sources[i]), int(views[i]), recipe)
                    if recipe is not None and views[i] >= 1 else None)
            return self._add((store_key, i), row, info.image_root, view, column)

        return from_store

    def add_thumbnails(self, out_dir: Path, size: int, workers: int | None = None,
                       **hooks: Any) -> int:
        """Make the thumbnails of every item under an image root; returns how many.
        ``hooks``: :func:`~pairkit.report.thumbs.make_thumbnails`' progress hook."""
        real_of: dict[int, Path | ColumnRow | ViewOf] = {}
        for k, root in self._roots.items():
            found, problem = resolve_under(root, self.rows[k]["path"] or "")
            if found is None:
                self.rows[k]["why"] = problem
                self.rows[k]["view_thumb"] = False
                continue
            real = ColumnRow(found, self._columns[k]) if k in self._columns else found
            real_of[k] = ViewOf(real, *self._views[k]) if k in self._views else real
        thumbs = make_thumbnails(real_of.values(), out_dir, size, workers, **hooks)
        for k, real in real_of.items():
            t = thumbs[real]
            self.rows[k]["thumb"], self.rows[k]["why"] = t.file, t.problem
        return sum(t.file is not None for t in thumbs.values())
