"""The ``dedup`` keep rules that read the image files (``best``, ``largest``), the
``keep_reason`` column, and ``best``'s second look at resized copies
(:mod:`pairkit.mine.keep_resized`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


def image_facts(root: Path, paths: np.ndarray, ids: np.ndarray,
                image_column: str | None = None) -> tuple[np.ndarray, ...]:
    """``(pixels, file bytes)`` float arrays for the items ``ids``; NaN where an image is
    missing, unreadable or outside the image root (never opened; the header is read, not
    the pixels). A tar member's or dataset row's bytes are its size
    (:func:`pairkit.encode.item_images.item_image`; ``image_column``: the store's,
    :func:`pairkit.encode.item_images.image_column_of`)."""
    import numpy as np
    from PIL import Image

    from pairkit.encode.item_images import item_image

    pixels = np.full(len(ids), np.nan)
    size = np.full(len(ids), np.nan)
    for k, i in enumerate(ids):
        got = item_image(root, str(paths[i]), image_column=image_column)
        if got is None:
            continue  # unreadable, or a path outside the image root: never opened
        source, nbytes = got
        try:
            with Image.open(source) as im:
                w, h = im.size
            pixels[k], size[k] = float(w * h), float(nbytes)
        except (OSError, ValueError, Image.DecompressionBombError):
            continue
    return pixels, size


def best_reader(image_root: str | None, paths: np.ndarray, warn: Callable[[str], None],
                image_column: str | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """The ``best`` keep rule as a goodness per item (higher is kept): the copy that lost
    least (:func:`pairkit.mine.keep_best.best_key`: JPEG quality band, then detail from
    sharpness, pixels and clipping, then file size), then the shortest path, then path
    order. Items whose image can't be read rank below every readable one (a warning says
    how many); without an image root (an imported store) only the path decides. The
    returned function keeps the facts it read in ``.facts`` (id -> CopyFacts or None).
    Tar members and dataset rows are read as ``embed`` read them (``image_column``: the
    store's, :func:`pairkit.encode.item_images.image_column_of`)."""
    import numpy as np

    from pairkit.core.paths import image_root_problem
    from pairkit.encode.item_images import item_image
    from pairkit.mine.keep_best import best_key, copy_facts

    problem = image_root_problem(image_root)
    root = Path(image_root) if image_root and problem is None else None
    if image_root and problem is not None:  # unset (an imported store): paths decide
        warn(f"--keep best: the store's image_root {problem}; keeping the shortest path of "
             "each group")

    def goodness(ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        readable = root is not None and root.is_dir()
        for i in ids.tolist():
            got = item_image(root, str(paths[i]), image_column=image_column) \
                if root is not None and readable else None
            facts = None if got is None else copy_facts(got[0], size=got[1])
            goodness.facts[i] = facts  # type: ignore[attr-defined]
        bad = sum(goodness.facts[i] is None for i in ids.tolist())  # type: ignore[attr-defined]
        if readable and bad:
            warn(f"--keep best: {bad} images unreadable under {root}; they are kept only "
                 "when no copy can be read")
        names = [str(paths[i]) for i in ids]
        path_rank = np.argsort(np.argsort(np.array(names, dtype=object), kind="stable"),
                               kind="stable")

        def key(k: int) -> tuple:
            facts = goodness.facts[int(ids[k])]  # type: ignore[attr-defined]
            quality = (1, *best_key(facts)) if facts is not None else (0,)
            return (quality, -len(names[k]), -int(path_rank[k]))

        order = sorted(range(len(ids)), key=key, reverse=True)
        out = np.empty(len(ids), dtype=float)
        out[order] = -np.arange(len(ids), dtype=float)  # best first = highest goodness
        return out

    goodness.facts = {}  # type: ignore[attr-defined]
    return goodness


KEEP_REASONS = {"first": "lowest id", "largest": "largest image",
                "central": "most similar to the others"}


def keep_reasons(table: pd.DataFrame, keep: str, paths: np.ndarray,
                 facts: dict[int, Any] | None,
                 sizes: dict[int, tuple[float, float]] | None = None) -> list[str | None]:
    """The ``keep_reason`` column: on each group's kept row why that copy was kept (for
    ``best``: :func:`pairkit.mine.keep_best.keep_reason` against the group's runner-up;
    for ``largest``, with ``sizes`` (id: pixels, file bytes), what decided: the pixels,
    the file size or, both equal, the lowest id), None on the other rows."""
    ids, groups, kept = (table[c].to_numpy() for c in ("id", "group", "keep"))
    if keep == "largest" and sizes:
        def why(mine: int, others: list[int]) -> str:
            return _largest_reason(sizes, mine, others)
    elif keep == "best" and facts is not None:
        def why(mine: int, others: list[int]) -> str:
            return _best_reason(facts, mine, others)
    else:
        reason = KEEP_REASONS.get(keep, keep)
        return [reason if k else None for k in kept]
    out: list[str | None] = [None] * len(table)
    by_group: dict[int, list[int]] = {}
    for row, g in enumerate(groups.tolist()):
        by_group.setdefault(g, []).append(row)
    for rows in by_group.values():
        kept_row = next(r for r in rows if kept[r])
        out[kept_row] = why(int(ids[kept_row]), [int(ids[r]) for r in rows if r != kept_row])
    return out


def _best_reason(facts: dict[int, Any], mine: int, others: list[int]) -> str:
    """``best``'s reason for keeping ``mine`` over the group's ``others`` (ids)."""
    from pairkit.mine.keep_best import best_key, keep_reason

    readable = [i for i in others if facts.get(i) is not None]
    runner_up = max(readable, key=lambda i: best_key(facts[i]), default=None)
    if facts.get(mine) is None:  # (a readable copy would have ranked first)
        return "images not readable: shortest path"
    return keep_reason(facts[mine], facts[runner_up] if runner_up is not None else None)


def _largest_reason(sizes: dict[int, tuple[float, float]], mine: int,
                    others: list[int]) -> str:
    """``largest``'s reason for keeping ``mine`` over the group's ``others`` (ids)."""
    kept_size = sizes.get(mine)
    other_sizes = [sizes.get(i) for i in others]
    if kept_size is None or not other_sizes or any(o is None for o in other_sizes):
        return KEEP_REASONS["largest"]
    runner_up = max(other_sizes)  # type: ignore[type-var]  # (pixels, bytes): the rule's order
    if kept_size[0] > runner_up[0]:  # type: ignore[index]
        return "largest image (most pixels)"
    if kept_size[1] > runner_up[1]:  # type: ignore[index]
        return "largest file (same pixels)"
    return "same pixels and file size: lowest id"


def largest_reader(image_root: str | None, paths: np.ndarray, warn: Callable[[str], None],
                   image_column: str | None = None) -> Any:
    """The ``largest`` keep rule: image area, file size as tie-break; None (warned) when
    the images can't be found. Falls back to ``first`` when some are unreadable.
    ``image_column``: a dataset store's (:func:`image_facts`)."""
    import numpy as np

    from pairkit.core.paths import image_root_problem

    problem = image_root_problem(image_root)
    if problem is not None:
        warn(f"--keep largest: the store's image_root {problem}; using --keep first")
        return None
    root = Path(image_root)

    def checked(ids: np.ndarray) -> np.ndarray:
        pixels, size = image_facts(root, paths, ids, image_column)
        checked.sizes.update(zip(np.asarray(ids).tolist(),  # type: ignore[attr-defined]
                                 zip(pixels.tolist(), size.tolist(), strict=True), strict=True))
        bad = int(np.isnan(pixels).sum())
        if bad:
            warn(f"--keep largest: {bad} images unreadable under {root}; using --keep first")
            checked.fell_back = True  # type: ignore[attr-defined]
            return np.asarray(-ids, dtype=float)  # larger = lower id: the 'first' rule
        return pixels + size / 1e12

    checked.fell_back = False  # type: ignore[attr-defined]
    checked.sizes = {}  # type: ignore[attr-defined]  # id: (pixels, file bytes), keep_reasons
    return checked


def rekeep_resized(table: pd.DataFrame, vectors: np.ndarray, paths: Any, file_sha256: Any,
                   image_root: str, facts: dict[int, Any], image_column: str | None = None
                   ) -> tuple[pd.DataFrame, dict[int, str]]:
    """``--keep best`` between resized copies (:mod:`pairkit.mine.keep_resized`): each
    group's kept copy compared with its members of other pixel counts; returns the table
    with the kept rows changed where that decides otherwise, and {new kept id: reason}.
    ``paths`` and ``file_sha256`` (None: no hashes): the items' by row id;
    ``image_column``: a dataset store's (tar members and rows are read from memory)."""
    from pairkit.encode.item_images import item_image
    from pairkit.mine.keep_best import best_key
    from pairkit.mine.keep_resized import rekeep_groups, resized_keeper

    root = Path(image_root)

    def pixels(i: int) -> float | None:
        f = facts.get(i)
        return None if f is None else f.pixels

    def file_of(i: int) -> Path | BinaryIO | None:  # a fresh one each call: read whole
        got = item_image(root, str(paths[i]), image_column=image_column)
        return None if got is None else got[0]

    new_keeper: dict[int, int] = {}
    reasons: dict[int, str] = {}
    for g, rows in table.groupby("group", sort=False):
        ids = rows["id"].tolist()
        if len(ids) < 2 or len({pixels(i) for i in ids}) < 2:
            continue
        kept = int(rows["id"][rows["keep"]].iloc[0])
        others = sorted((i for i in ids if i != kept and facts.get(i) is not None),
                        key=lambda i: best_key(facts[i]), reverse=True)
        new, why = resized_keeper(kept, others, pixels, file_of)
        if why is not None and new != kept:
            new_keeper[int(g)] = new
            reasons[new] = why
    return rekeep_groups(table, vectors, file_sha256, new_keeper), reasons
