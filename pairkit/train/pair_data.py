"""Mined pairs as training data for a model on the images: a map-style dataset of
(anchor, positive, negatives) images read through the store's image root, its torch
DataLoader, and the export of a pair table to a Hugging Face ``datasets.Dataset``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.errors import PairkitError, UsageError

if TYPE_CHECKING:
    import pandas as pd

DATASETS_HINT = ("this needs the Hugging Face datasets package: pip install datasets "
                 "(or pip install 'pairkit[hf]')")


def require_datasets() -> Any:
    """``import datasets``, or PairkitError with the install hint."""
    try:
        import datasets
    except ImportError:
        raise PairkitError(DATASETS_HINT) from None
    return datasets


def _read(table: Any) -> pd.DataFrame:
    from pairkit.core.tables import read_table

    return read_table(str(table)) if isinstance(table, (str, os.PathLike)) else table


def pair_examples(table: pd.DataFrame, keep_flagged: bool = False
                  ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """``(anchors, positives, negatives)`` item ids of the examples of a triplet or
    n-tuple table: one example per (anchor, positive), in the order of their first rows,
    its negatives in rank order (``neg_rank``, else table order), wherever its rows are.
    Negatives flagged ``false_negative`` (``--fn-mode keep`` / ``attract``) are left out
    unless ``keep_flagged``: a flagged triplet row drops its negative, not the example (whose
    negatives may all go), an n-tuple row flagged in any slot is flagged as a whole. The
    mined positives' rows (``positive_kind`` ``mined``: extra positives of an anchor, with
    no negatives of their own) are left out."""
    from pairkit.core.table_items import check_negative_columns

    check_negative_columns(list(table.columns))
    cols = set(table.columns)
    if "positive_kind" in cols:
        table = table[table["positive_kind"].astype(str) != "mined"]
    flagged = (table["false_negative"].fillna(False).astype(bool).to_numpy()
               if "false_negative" in cols and not keep_flagged
               else np.zeros(len(table), dtype=bool))
    from pairkit.core.pairs import integer_ids

    if {"anchor_id", "positive_id", "negative_id"} <= cols:
        a = integer_ids(table["anchor_id"], "anchor_id", allow_missing=False)
        p = integer_ids(table["positive_id"], "positive_id", allow_missing=False)
        n = np.where(flagged, -1, integer_ids(table["negative_id"], "negative_id", True))
        if len(a) == 0:
            return a, p, []
        # an example's rows together (in its first row's place), its negatives by rank:
        # a filtered or shuffled table gives the examples of the table as written
        import pandas as pd

        key = pd.factorize(pd.MultiIndex.from_arrays([a, p]))[0]
        rank = (table["neg_rank"].to_numpy(np.int64) if "neg_rank" in cols
                else np.arange(len(a)))
        order = np.lexsort((np.arange(len(a)), rank, key))
        a, p, n = a[order], p[order], n[order]
        new = np.r_[True, (a[1:] != a[:-1]) | (p[1:] != p[:-1])]
        starts = np.flatnonzero(new)
        ends = np.r_[starts[1:], len(a)]
        negs = [n[s:e][n[s:e] >= 0] for s, e in zip(starts, ends, strict=True)]
        return a[starts], p[starts], negs
    neg_cols = sorted((c for c in cols if str(c).startswith("negative_id_")),
                      key=lambda c: int(str(c).rsplit("_", 1)[1]))
    if {"anchor_id", "positive_id"} <= cols and neg_cols:
        table = table[~flagged]
        # an empty slot (a blank CSV cell) is no negative, as train reads it
        m = np.stack([integer_ids(table[c], str(c), allow_missing=True) for c in neg_cols],
                     axis=1)
        return (integer_ids(table["anchor_id"], "anchor_id", allow_missing=False),
                integer_ids(table["positive_id"], "positive_id", allow_missing=False),
                [row[row >= 0] for row in m])
    raise UsageError("the pair table needs anchor_id, positive_id and negative_id (triplet) "
                     "or negative_id_1.. (n-tuple) columns; labeled-pair tables have no "
                     "(anchor, positive, negatives) examples")


def _check_fits(table: pd.DataFrame, store: Any) -> None:
    """PairkitError when ``table`` is not ``store``'s: its store_id, its ids, and its paths
    equal to the store's for those ids (:func:`pairkit.core.table_items.table_mismatch`)."""
    from pairkit.core.table_items import item_columns, table_mismatch
    from pairkit.train.data import table_kind

    kind = table_kind(table)
    for col, _ in item_columns(kind, list(table.columns)):  # as train says it, not a KeyError
        if col not in table.columns:
            raise PairkitError(f"pair table lacks column {col}")
    why = table_mismatch(table, kind, store)
    if why is not None:
        raise PairkitError(f"the pair table doesn't fit store {store.root}: {why}")


def _default_transform(img: Any) -> Any:
    from torchvision.transforms.functional import to_tensor

    return to_tensor(img)


class PairImages:
    """(anchor, positive, negatives) images of a pair table, read from the store's image
    root; a map-style dataset for ``torch.utils.data.DataLoader``.

    Item ``i`` is ``(transform(anchor), transform(positive), negatives)``, negatives
    stacked to (negatives, ...) when the transform gives tensors (0 negatives: an empty
    (0, ...) tensor). ``negatives``: how many
    per example, the first ones in rank order (None: the fewest any example has, so that
    none is left out); examples with fewer are left out and counted in ``skipped``. Paths
    come from the store by item id (the table must be the store's: its ``store_id``) and
    must stay under the image root (checked up front);
    images are decoded with the bomb guard. ``transform`` default: ``to_tensor`` (images
    of different sizes then need a resizing transform to be batched).
    """

    def __init__(self, table: Any, store: Any, *,
                 transform: Callable[[Any], Any] | None = None, negatives: int | None = None,
                 keep_flagged: bool = False) -> None:
        from pairkit.core.paths import first_bad_path
        from pairkit.core.tables import named_store_ids

        table = _read(table)
        if "store_id" in table.columns and len(table):
            # empty cells are no store's id (train reads them so: a blanked column)
            ids = named_store_ids(table["store_id"].unique())
            if ids - {store.content_id}:
                other = sorted(ids - {store.content_id})[0]
                raise PairkitError(f"the pair table was mined from store {other}, not "
                                   f"{store.root} ({store.content_id})")
        if len(table):  # its paths must be this store's too (one content id, two item tables)
            _check_fits(table, store)
        root = store.manifest.get("image_root")
        if not root:
            raise PairkitError(f"store {store.root} has no image_root (made by import?): "
                               "there are no images to read")
        a, p, negs = pair_examples(table, keep_flagged)
        counts = np.array([len(n) for n in negs], dtype=np.int64)
        if not len(counts):
            raise PairkitError("the pair table has no examples (mined-positive rows are left "
                               "out, and so are n-tuple rows flagged false_negative)")
        if negatives is None:
            negatives = int(counts.min())
        if negatives < 0:
            raise UsageError(f"negatives must be >= 0, got {negatives}")
        if negatives > counts.max():
            raise PairkitError(f"no example of the pair table has {negatives} negatives "
                               f"(most: {int(counts.max())})")
        ok = counts >= negatives
        self.skipped = int((~ok).sum())
        self.anchors, self.positives = a[ok], p[ok]
        self.negatives = (np.stack([n[:negatives] for n, k in zip(negs, ok, strict=True) if k])
                          if ok.any() else np.zeros((0, negatives), np.int64))
        n_items = store.count
        used = np.concatenate([self.anchors, self.positives, self.negatives.ravel()])
        if len(used) and (used.min() < 0 or used.max() >= n_items):
            raise PairkitError(f"the pair table names item ids outside store {store.root}")
        self.paths = store.items["path"].to_numpy(dtype=object)
        bad = first_bad_path(self.paths[np.unique(used)])
        if bad is not None:
            raise PairkitError(f"item path {bad[1]!a} {bad[2]}: refusing to read it")
        from pairkit.encode.item_images import image_column_of

        self.root = str(root)
        self.image_column = image_column_of(store)
        self.transform = transform or _default_transform

    def __len__(self) -> int:
        return len(self.anchors)

    def image(self, item: int) -> Any:
        """The transformed image of store item ``item``."""
        from pairkit.encode.item_images import load_item_image

        return self.transform(load_item_image(self.root, str(self.paths[item]),
                                              image_column=self.image_column))

    def __getitem__(self, i: int) -> tuple[Any, Any, Any]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        negs = [self.image(int(n)) for n in self.negatives[i]]
        anchor = self.image(int(self.anchors[i]))  # read in the order they always were
        import torch

        if negs and all(isinstance(x, torch.Tensor) for x in negs):
            stacked: Any = torch.stack(negs)
        elif not negs and isinstance(anchor, torch.Tensor):  # (0, ...): batches stack it
            stacked = anchor.new_empty((0, *anchor.shape))
        else:
            stacked = negs
        return anchor, self.image(int(self.positives[i])), stacked


def loader(data: PairImages, **options: Any) -> Any:
    """A ``torch.utils.data.DataLoader`` over ``data`` with ``options`` as given: batches
    of (anchors (B, ...), positives (B, ...), negatives (B, K, ...)). UsageError for the
    options DataLoader refuses (a negative ``num_workers``, ``sampler`` with ``shuffle``
    ...)."""
    import torch

    try:
        return torch.utils.data.DataLoader(data, **options)
    except (ValueError, TypeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"DataLoader refused the options: {first}") from None


def path_columns(table: pd.DataFrame) -> list[str]:
    """The path columns of a pair table, in table order."""
    return [c for c in table.columns if str(c).endswith("_path") or
            str(c).startswith("negative_path_")]


def to_hf_dataset(table: Any, store: Any = None, *, images: str = "paths") -> Any:
    """A pair table as a ``datasets.Dataset``: its columns as they are (``images="paths"``)
    or, with ``images="bytes"``, also one ``Image`` column per path column (anchor_path ->
    anchor_image ...) holding the image bytes read from ``store``'s image root (null
    where a path is null)."""
    if images not in ("paths", "bytes"):
        raise UsageError(f"images must be paths or bytes, got {images}")
    table = _read(table).reset_index(drop=True)
    if images == "bytes":
        if store is None:
            raise UsageError('images="bytes" needs the store the table was mined from')
        _check_fits(table, store)  # the images are read by the table's paths
    datasets = require_datasets()
    if images == "paths":
        return datasets.Dataset.from_pandas(table, preserve_index=False)
    root = store.manifest.get("image_root")
    if not root:
        raise PairkitError(f"store {store.root} has no image_root (made by import?)")
    import pandas as pd

    from pairkit.encode.item_images import image_column_of, read_item_bytes

    column = image_column_of(store)
    out = table.copy()
    feats = {}
    for col in path_columns(table):
        name = str(col).replace("_path", "_image")
        # object dtype: an empty list would be float64, which can't be cast to an Image
        out[name] = pd.Series([None if pd.isna(p) else
                               {"bytes": read_item_bytes(root, str(p), image_column=column),
                                "path": str(p)}
                               for p in table[col].tolist()], index=out.index, dtype=object)
        feats[name] = datasets.Image()
    # typed from every row: the first 0 rows type a text column as null, which its
    # values then can't be cast to (n-tuple slots, --fn-mode keep's columns)
    base = datasets.Dataset.from_pandas(table, preserve_index=False).features
    return datasets.Dataset.from_pandas(out, preserve_index=False,
                                        features=datasets.Features({**base, **feats}))
