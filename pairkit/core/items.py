"""The item table of a store: its columns and their dtypes, whatever a writer was given."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.errors import PairkitError

if TYPE_CHECKING:
    import pandas as pd

ITEM_COLUMNS = ("id", "path", "source", "view", "label", "file_sha256")


def normalize_items(items: pd.DataFrame, start_id: int = 0) -> pd.DataFrame:
    """Return ``items`` with the store's columns and dtypes, ids from ``start_id``.

    ``path`` is required; ``source`` defaults to ``path`` (also where a cell is missing or
    empty), ``view`` to 0,
    ``label`` and ``file_sha256`` to null.
    """
    import pandas as pd

    if "path" not in items.columns:
        raise PairkitError("items need a 'path' column")
    n = len(items)
    out = pd.DataFrame(
        {
            "id": np.arange(start_id, start_id + n, dtype=np.int64),
            "path": items["path"].astype(str).to_numpy(),
        }
    )
    out["source"] = out["path"]
    if "source" in items.columns:  # a missing (or empty) source is the path, as no column
        text = items["source"].astype(str).to_numpy(dtype=object)
        missing = items["source"].isna().to_numpy() | (text == "")
        out["source"] = np.where(missing, out["path"].to_numpy(dtype=object), text)
    if "view" in items.columns:
        out["view"] = item_views(items["view"])
    else:
        out["view"] = np.zeros(n, dtype=np.int16)
    for col in ("label", "file_sha256"):
        if col in items.columns:
            values = items[col].to_numpy(dtype=object)
            out[col] = pd.array(
                [None if is_missing_text(v) else str(v) for v in values], dtype="string"
            )
        else:
            out[col] = pd.array([None] * n, dtype="string")
    return out


MAX_VIEW = int(np.iinfo(np.int16).max)


def item_views(values: Any) -> np.ndarray:
    """An items table's ``view`` column as int16: whole numbers in 0 .. 32767, else a
    :class:`PairkitError` naming the first row that is not one (nothing rounded or
    wrapped)."""
    import pandas as pd

    raw = pd.Series(values).reset_index(drop=True)
    views = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(views) | (views != np.round(views)) | (views < 0) | (views > MAX_VIEW)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise PairkitError(f"items column 'view' must hold whole numbers 0-{MAX_VIEW}: row "
                           f"{row} holds {str(raw.iloc[row])!a}")
    return views.astype(np.int16)


def is_missing_text(value: Any) -> bool:
    """True for a cell of a text column (a label, a hash) that holds nothing: None, NaN,
    pandas' NA, or an empty string (what an empty CSV cell is read as, so a table means
    the same in every format)."""
    if value is None or (isinstance(value, str) and value == ""):
        return True
    try:
        import pandas as pd

        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False
