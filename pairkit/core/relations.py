"""Relations: which items of a store are positives of each other.

- ``instance``: items with the same ``source`` (the views of one image).
- ``label``: items with the same (non-missing) ``label``.
- ``pairs:FILE``: an explicit table of anchor/positive paths. Paths are resolved
  against the store's ``path`` column (every view of a path takes part);
  a path that leaves the image root (absolute, or ``../x``) is an error.

Anchors of mining are the items that have at least one positive. Everything
that is not a positive of an anchor is a candidate negative of it; the
anchor itself and the other views of its source are never negatives (see
:mod:`pairkit.mine.hard_negatives`).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pairkit.core.unique import sorted_unique
from pairkit.errors import PairkitError, UsageError

if TYPE_CHECKING:
    import pandas as pd

RELATION_KINDS = ("instance", "label", "pairs")


@dataclass
class Relation:
    """Positives of each item of a store of ``n`` rows.

    Group relations (instance, label) hold ``group`` (N,) int64 codes (-1: no
    group): items with the same code are positives. The pairs relation holds
    ``pair_keys``: sorted int64 keys ``a * N + p`` for every listed pair, both
    directions (a positive is never handed out as a negative either way), and
    ``pair_anchors``/``pair_positives`` as listed (anchor -> positive).
    """

    kind: str
    n: int
    description: str
    group: np.ndarray | None = None
    pair_anchors: np.ndarray | None = None
    pair_positives: np.ndarray | None = None
    pair_keys: np.ndarray | None = None
    rows_total: int = 0
    rows_unknown: int = 0
    unknown_examples: tuple[str, ...] = ()
    rows_empty: int = 0  # of rows_unknown: an empty anchor or positive cell

    # -- anchors --------------------------------------------------------------------
    def anchors(self) -> np.ndarray:
        """Sorted int64 ids of the items that have at least one positive."""
        if self.group is not None:
            g = self.group
            valid = g >= 0
            if not valid.any():
                return np.zeros(0, dtype=np.int64)
            sizes = np.bincount(g[valid])
            has = np.zeros(self.n, dtype=bool)
            has[valid] = sizes[g[valid]] >= 2
            return np.flatnonzero(has).astype(np.int64, copy=False)
        assert self.pair_anchors is not None
        return sorted_unique(self.pair_anchors).astype(np.int64)

    # -- membership -----------------------------------------------------------------
    def is_positive(self, anchors: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """(n, k) bool: ``cand[i, j]`` is a positive of ``anchors[i]`` (never the anchor
        itself; -1 padding is False)."""
        anchors = np.asarray(anchors, dtype=np.int64)
        cand = np.asarray(cand, dtype=np.int64)
        valid = (cand >= 0) & (cand != anchors[:, None])
        safe = np.maximum(cand, 0)
        if self.group is not None:
            ga = self.group[anchors][:, None]
            return valid & (ga >= 0) & (ga == self.group[safe])
        assert self.pair_keys is not None
        keys = anchors[:, None] * self.n + safe
        pos = np.searchsorted(self.pair_keys, keys)
        pos = np.minimum(pos, max(len(self.pair_keys) - 1, 0))
        found = self.pair_keys[pos] == keys if len(self.pair_keys) else np.zeros_like(valid)
        return valid & found

    # -- positive sets --------------------------------------------------------------
    def positive_sets(
        self, anchors: np.ndarray, seed: int = 0, max_positives: int = 64
    ) -> tuple[np.ndarray, np.ndarray]:
        """The positives considered for each anchor, as a ragged array.

        Returns ``(offsets, ids)``: ``ids[offsets[i]:offsets[i+1]]`` are the
        positives of ``anchors[i]`` (int64). A group larger than
        ``max_positives + 1`` contributes a seeded random sample of
        ``max_positives`` members (label relation with big classes); instance
        groups and listed pairs are complete.
        """
        anchors = np.asarray(anchors, dtype=np.int64)
        if self.group is not None:
            return _group_positive_sets(self.group, anchors, seed, max_positives)
        assert self.pair_anchors is not None and self.pair_positives is not None
        order = np.argsort(self.pair_anchors, kind="stable")
        pa = self.pair_anchors[order]
        pp = self.pair_positives[order]
        lo = np.searchsorted(pa, anchors, side="left")
        hi = np.searchsorted(pa, anchors, side="right")
        counts = hi - lo
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        # lo[i], lo[i] + 1, ..., hi[i] - 1 for every anchor, in one array
        idx = np.repeat(lo - offsets[:-1], counts) + np.arange(int(offsets[-1]))
        return offsets, pp[idx.astype(np.int64)].astype(np.int64)


def _group_positive_sets(
    group: np.ndarray, anchors: np.ndarray, seed: int, max_positives: int
) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(group, kind="stable")
    ga = group[anchors]
    if len(anchors) and int(ga.min()) >= 0:
        # each group's first place in sorted order and its size, by one count per group
        # (what the two searchsorted below give for an anchor in a group)
        sizes_of = np.bincount(group[group >= 0])
        first_of = int((group < 0).sum()) + np.cumsum(sizes_of) - sizes_of
        lo, sizes = first_of[ga], sizes_of[ga]
    else:
        sorted_g = group[order]
        lo = np.searchsorted(sorted_g, ga, side="left")
        sizes = np.searchsorted(sorted_g, ga, side="right") - lo  # anchor included
    big = sizes > max_positives + 1
    any_big = bool(big.any())
    counts = np.where(big, max_positives, sizes - 1) if any_big else sizes - 1
    offsets = np.zeros(len(anchors) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    ids = np.empty(int(offsets[-1]), dtype=np.int64)
    # small groups: every member except the anchor, in sorted order; the j-th positive
    # is the member at lo + j, or lo + j + 1 from the anchor's own place on
    small = np.flatnonzero(~big) if any_big else slice(None)
    start, count, dest = lo[small], counts[small], offsets[:-1][small]
    if len(count):
        place = np.empty(len(group), dtype=np.int64)
        place[order] = np.arange(len(group))
        own = place[anchors[small]] - start  # the anchor's place in its group
        for j in range(int(count.max(initial=0))):
            more = count > j
            if not more.all():
                start, count, own, dest = start[more], count[more], own[more], dest[more]
            ids[dest + j] = order[start + j + (j >= own)]
    # big groups (label relation): a seeded sample of max_positives members
    rng = np.random.default_rng(seed)
    for i in np.flatnonzero(big):
        members = order[lo[i]:lo[i] + sizes[i]]
        members = members[members != anchors[i]]
        pick = np.sort(rng.choice(members, size=max_positives, replace=False))
        ids[offsets[i]:offsets[i + 1]] = pick
    return offsets, ids


def parse_relation(text: str) -> tuple[str, str | None]:
    """``instance`` | ``label`` | ``pairs:FILE`` -> ``(kind, file or None)``."""
    if text in ("instance", "label"):
        return text, None
    if text.startswith("pairs:") and len(text) > len("pairs:"):
        return "pairs", text[len("pairs:"):]
    raise UsageError(f"--relation must be instance, label or pairs:FILE, got {text!r}")


def default_relation(items: pd.DataFrame) -> str:
    """``instance`` when some source has several views, else ``label`` when labels
    exist, else an error saying what to pass."""
    if len(items) and items["source"].duplicated().any():
        return "instance"
    if len(items) and items["label"].notna().any():
        return "label"
    raise PairkitError(
        "can't choose a relation: every source has one view and the store has no labels; "
        "pass --relation pairs:FILE (or embed with --views 2 or --labels)"
    )


def build_relation(
    kind: str, items: pd.DataFrame, pairs: pd.DataFrame | None = None
) -> Relation:
    """Make the :class:`Relation` ``kind`` over a store's item table.

    ``pairs`` (for ``kind='pairs'``): a table with columns ``anchor``/``positive``
    (or ``anchor_path``/``positive_path``) of image paths relative to the root.
    """
    from pairkit.core.store import codes_of

    n = len(items)
    if kind == "instance":
        return Relation("instance", n, "instance (views of the same source)",
                        group=codes_of(items["source"])[0])
    if kind == "label":
        if not items["label"].notna().any():
            raise PairkitError("--relation label: the store has no labels")
        return Relation("label", n, "label (same label)", group=codes_of(items["label"])[0])
    if kind == "pairs":
        if pairs is None:
            raise UsageError("--relation pairs needs a file: pairs:FILE")
        return _pairs_relation(items, pairs)
    raise UsageError(f"--relation must be instance, label or pairs:FILE, got {kind!r}")


def normalize_rel_path(path: str) -> str:
    """Normalise a relative image path (``a/./b`` -> ``a/b``); reject paths that leave
    the image root (absolute, ``..``) with a one-line error."""
    p = str(path).replace("\\", "/")
    if p.startswith("/") or (len(p) > 1 and p[1] == ":"):
        raise PairkitError(f"pairs file: path {path!r} is absolute; paths must be relative "
                           "to the image root")
    norm = posixpath.normpath(p)
    if norm == ".." or norm.startswith("../"):
        raise PairkitError(f"pairs file: path {path!r} escapes the image root")
    return norm


def _pairs_relation(items: pd.DataFrame, pairs: pd.DataFrame) -> Relation:
    cols = set(pairs.columns)
    if {"anchor", "positive"} <= cols:
        a_col, p_col = "anchor", "positive"
    elif {"anchor_path", "positive_path"} <= cols:
        a_col, p_col = "anchor_path", "positive_path"
    else:
        raise PairkitError(
            "pairs file needs columns anchor,positive (or anchor_path,positive_path), got "
            + ",".join(map(str, pairs.columns))
        )
    n = len(items)
    index: dict[str, list[int]] = {}
    for i, p in enumerate(items["path"].to_numpy(dtype=object)):
        index.setdefault(posixpath.normpath(str(p).replace("\\", "/")), []).append(i)
    anchors: list[int] = []
    positives: list[int] = []
    unknown = empty = 0
    examples: list[str] = []
    for a_raw, p_raw in zip(pairs[a_col].to_numpy(dtype=object),
                            pairs[p_col].to_numpy(dtype=object), strict=True):
        if any(v is None or isinstance(v, float) or str(v) == "" for v in (a_raw, p_raw)):
            unknown += 1  # an empty cell (None, NaN or ""): no path
            empty += 1
            continue
        a_ids = index.get(normalize_rel_path(a_raw))
        p_ids = index.get(normalize_rel_path(p_raw))
        if not a_ids or not p_ids:
            unknown += 1
            if len(examples) < 3:
                examples.append(str(a_raw if not a_ids else p_raw))
            continue
        for a in a_ids:
            for p in p_ids:
                if a != p:
                    anchors.append(a)
                    positives.append(p)
    total = len(pairs)
    if not anchors:
        if total == 0:
            raise PairkitError("pairs file is empty")
        said = [f"e.g. {', '.join(repr(e) for e in examples)}"] if examples else []
        said += [empty_cells(empty)] if empty else []
        raise PairkitError(
            f"pairs file: none of its {total} rows match store paths ({', '.join(said)})"
            if said else
            f"pairs file: none of its {total} rows give a pair of two different store items"
        )
    pa = np.asarray(anchors, dtype=np.int64)
    pp = np.asarray(positives, dtype=np.int64)
    keys = sorted_unique(np.concatenate([pa * n + pp, pp * n + pa]))
    return Relation(
        "pairs", n, f"pairs ({total - unknown} of {total} rows matched)",
        pair_anchors=pa, pair_positives=pp, pair_keys=keys, rows_total=total,
        rows_unknown=unknown, unknown_examples=tuple(examples), rows_empty=empty,
    )


def empty_cells(rows: int, total: int | None = None) -> str:
    """``2 have an empty anchor or positive cell`` (``2 of 9 rows have ...`` with
    ``total``): the pairs rows without a path."""
    of = f" of {total:,} rows" if total is not None else ""
    return f"{rows:,}{of} {'has' if rows == 1 else 'have'} an empty anchor or positive cell"


def load_relation(text: str | None, items: pd.DataFrame) -> Relation:
    """Parse ``--relation`` (None = the default for this store) and build it.

    Reads the pairs file for ``pairs:FILE``.
    """
    from pairkit.core.tables import read_table

    kind, file = parse_relation(text) if text else (default_relation(items), None)
    pairs = None
    if kind == "pairs":
        assert file is not None
        from pairkit.core.remote import is_url

        # a folder is a table folder (parquet parts), as every table input reads one; an
        # object: read_table says "table URL not found"
        if file != "-" and not is_url(file) and not Path(file).exists():
            raise PairkitError(f"pairs file {file} not found")
        pairs = read_table(file)
    return build_relation(kind, items, pairs)
