"""``pairkit dedup`` from a store folder to a table: its near-duplicate groups
(:func:`run_dedup`) or, with ``--against``, its sources that duplicate another store's
(:func:`run_against`); their summary lines. The files: :mod:`pairkit.mine.dedup_command`;
the keep rules that read images: :mod:`pairkit.mine.keep_readers`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pairkit.errors import PairkitError, UsageError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

DEFAULT_KEEP = "best"


@dataclass(frozen=True)
class DedupConfig:
    """Options of ``pairkit dedup`` (``threshold`` None: the measured default)."""

    threshold: float | None = None
    keep: str = DEFAULT_KEEP
    exact_only: bool = False
    batch_size: int = 4096
    device: str = "auto"
    absolute: bool = False
    backend: str = "auto"  # auto, faiss, torch (pairkit.index.backend)
    method: str = "auto"  # auto, pixels, threshold (pairkit.mine.near_duplicate_check)
    pixel_threshold: float | None = None  # None: calibrated on the store


def run_dedup(store: str | Path, cfg: DedupConfig, warn: Callable[[str], None] = lambda _: None,
              pairs: Any = None, progress: Callable[[int], None] | None = None,
              on_start: Callable[[int], None] | None = None
              ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Open the store at ``store``, group its sources; return the table (with paths) and a
    summary.

    ``warn`` gets one line when a keep rule can't read the images and falls back.
    ``pairs``: the near-duplicate pair search
    (:func:`pairkit.mine.near_duplicates.find_near_duplicates`), run on the CPUs with
    FAISS; None: the local one on ``cfg.device``. The command line passes the Ray one for
    ``--ray`` (:class:`pairkit.distributed.dedup.RayPairs`); its ``describe()`` (after
    the search) goes into the summary's ``ray``. ``on_start``/``progress``: the progress
    hook, ``on_start(sources)`` then ``progress(m)`` adding up to it: of the threshold
    method's search (:func:`pairkit.index.range_search.range_search_blocks`, per
    block; the Ray one's as its blocks come back: :class:`pairkit.distributed.dedup.
    RayPairs`), or of the pixels method's first pass over the images (one per source);
    not called by the exact-only run.
    """
    import numpy as np

    from pairkit.core.remote import is_url
    from pairkit.core.row_view import is_view, store_view
    from pairkit.core.store import Store
    from pairkit.encode.item_images import image_column_of
    from pairkit.mine.keep_readers import rekeep_resized
    from pairkit.mine.near_duplicate_check import choose_check
    from pairkit.mine.near_duplicates import find_near_duplicates
    from pairkit.mine.thresholds import reachable

    threshold = check_dedup(cfg)
    asked_ray = pairs is not None
    if cfg.exact_only:
        pairs = None
    if pairs is not None:
        from pairkit.index.backend import ray_search

        ray_search("dedup", cfg.device, cfg.backend)
    # on Ray the workers read the store: the manifest only, here, for one on object storage
    st = Store.open(store, verify=not (pairs is not None and is_url(store)))
    image_root = st.manifest.get("image_root")
    column = image_column_of(st)  # a dataset store's rows: read from the column embedded
    if cfg.absolute and not image_root:
        raise UsageError(f"--absolute needs the store's image_root, and {store} has none "
                         "(made by import?)")
    columns = item_columns(st, as_objects=pairs is None)
    if cfg.exact_only:
        refuse_without_hashes(columns.file_sha256, store)
    paths = columns.paths
    keep, sizes = keep_sizes(cfg.keep, image_root, paths, warn, column)
    # on Ray: rows read where they lie (the search's on the workers, here only the
    # candidates' rows: find_near_duplicates), never the store's float32 copy
    vectors = store_view(st) if pairs is not None else st.vectors(np.float32)
    device, backend = ("cpu", "faiss") if pairs else (cfg.device, cfg.backend)
    met = reachable(threshold, st.dtype)  # -t 1: identical rows, as stored
    check = choose_check(
        vectors, paths, image_root, cfg.method, None if cfg.threshold is None else met,
        cfg.pixel_threshold, image_column=column, batch_size=cfg.batch_size, device=device,
        backend=backend, pairs=pairs, progress=progress, on_start=on_start)
    result = find_near_duplicates(
        vectors, met, file_sha256=columns.file_sha256, sources=columns.sources,
        views=columns.views, keep=keep, sizes=sizes, near=not cfg.exact_only,
        batch_size=cfg.batch_size, device=device, backend=backend, pairs=pairs, check=check)
    table = result.table
    resized: dict[int, str] = {}
    if keep == "best" and getattr(sizes, "facts", None) and image_root:
        grouped = vectors.gather(table["id"].to_numpy()) if is_view(vectors) else vectors
        table, resized = rekeep_resized(table, grouped, paths, columns.sha_of, image_root,
                                        sizes.facts, column)
    table.insert(2, "path", listed_paths(table, paths, store, image_root, cfg.absolute))
    if getattr(sizes, "fell_back", False):
        keep = "first"
    table["keep_reason"] = keep_reason_column(table, keep, paths, sizes, resized)
    summary = {
        "groups": int(table["group"].nunique()),
        "sources_in_groups": len(table),
        "sources": columns.n_sources,
        "items_in_groups": int((result.item_group >= 0).sum()),
        "items": st.count,
        "drop": int((~table["keep"]).sum()),
        "exact": int((table["match"] == "exact").sum()),
        "near": int((table["match"] == "near").sum()),
        "split": result.components_split,
        "threshold": threshold,
        "decision": result.decision if not cfg.exact_only else None,
        "keep": keep,
        "exact_only": cfg.exact_only,
        "ray": pairs.describe() if pairs is not None else None,
    }
    if asked_ray and (cfg.exact_only or (result.decision or {}).get("method") == "pixels"):
        # the address was given and nothing went to the cluster: said, not silent
        summary["ray"] = None
        warn("--ray: " + ("exact duplicates are found by file hash" if cfg.exact_only else
                          "the pixels method (the default for a store whose images can be "
                          "read) runs") + " on this machine; the cluster was not used "
             "(--method threshold searches on it)")
    return table, summary


@dataclass(frozen=True)
class ItemColumns:
    """What ``dedup`` reads of the item table: ``paths`` (indexable by row ids),
    ``sources`` and ``views`` (N,), ``file_sha256`` (N,) hashes or their codes (None:
    none in the store), ``sha_of`` the hashes by row id (None: none), ``n_sources``."""

    paths: Any
    sources: np.ndarray
    views: np.ndarray
    file_sha256: np.ndarray | None
    sha_of: Any
    n_sources: int


def refuse_without_hashes(hashes: np.ndarray | None, store: str | Path) -> None:
    """PairkitError when ``--exact-only`` has no file hash to compare in ``store`` (an
    imported store without a ``file_sha256`` column): "0 groups" would read as "no file
    is repeated"."""
    import pandas as pd

    if hashes is None or len(hashes) == 0 or bool(pd.isna(pd.Series(hashes)).all()):
        raise PairkitError(f"--exact-only compares file hashes, and store {store} has none "
                           "(made by import without a file_sha256 column): leave it out to "
                           "compare the embeddings")


def item_columns(st: Any, as_objects: bool = True) -> ItemColumns:
    """The item table's columns ``dedup`` needs. ``as_objects``: from the parsed table (a
    run here, which reads the images and vectors anyway); else read from the table's file
    by pyarrow without a Python object per item (``dedup --ray``'s driver): sources and
    hashes as integer codes, paths and hashes read by row where used
    (:class:`pairkit.core.columns.StringColumn`), the file's bytes let go after."""

    if as_objects:
        items = st.items
        sha = items["file_sha256"].to_numpy(dtype=object, na_value=None)
        return ItemColumns(items["path"].to_numpy(dtype=object),
                           items["source"].to_numpy(dtype=object), items["view"].to_numpy(),
                           sha, sha, int(items["source"].nunique()) if len(items) else 0)
    from pairkit.core.columns import StringColumn, hashed_codes, missing_as_null
    from pairkit.core.heap import return_free_memory

    sources = hashed_codes(lambda: st.item_batches("source"), st.count)
    path, view, sha = st.item_columns("path", "view", "file_sha256")
    st.release_items()
    # the hashes, held anyway for the rows that read them, coded from that array (none:
    # an imported store, nothing to code)
    sha_codes = (hashed_codes(lambda: iter([missing_as_null(sha)]), st.count).codes
                 if sha.null_count < len(sha) else None)
    return_free_memory()
    hashed = sha_codes is not None and bool((sha_codes >= 0).any())
    return ItemColumns(StringColumn(path), sources.codes, view.to_numpy(zero_copy_only=False),
                       sha_codes if hashed else None, StringColumn(sha) if hashed else None,
                       len(sources.values))


def check_dedup(cfg: DedupConfig) -> float:
    """The threshold ``cfg`` asks for (None: the measured default), after checking it, the
    keep rule, the batch size and that ``exact_only`` comes without the near-copy options;
    UsageError naming the option otherwise."""
    from pairkit.mine.near_duplicate_check import check_pixel_threshold
    from pairkit.mine.near_duplicates import DEFAULT_THRESHOLD, KEEP_RULES, check_threshold

    threshold = check_threshold(DEFAULT_THRESHOLD if cfg.threshold is None else cfg.threshold)
    check_pixel_threshold(cfg.pixel_threshold)
    if cfg.exact_only:
        for given, name in ((cfg.threshold is not None, "--threshold"),
                            (cfg.method != "auto", "--method"),
                            (cfg.pixel_threshold is not None, "--pixel-threshold")):
            if given:
                raise UsageError(f"{name} does not apply to --exact-only (copies by file "
                                 "hash)")
    if cfg.keep not in KEEP_RULES:
        raise UsageError(f"--keep must be one of {', '.join(KEEP_RULES)}, got {cfg.keep}")
    if cfg.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {cfg.batch_size}")
    return threshold


def keep_sizes(keep: str, image_root: str | None, paths: np.ndarray,
               warn: Callable[[str], None], image_column: str | None = None
               ) -> tuple[str, Any]:
    """``(keep rule, sizes)`` for :func:`~pairkit.mine.near_duplicates.find_near_duplicates`:
    the image-reading rules' goodness per item (:mod:`pairkit.mine.keep_readers`), None for
    the others; ``largest`` becomes ``first`` (warned) when the images can't be found.
    ``image_column``: a dataset store's (:func:`pairkit.encode.item_images.image_column_of`)."""
    from pairkit.mine.keep_readers import best_reader, largest_reader

    if keep == "best":
        return keep, best_reader(image_root, paths, warn, image_column)
    if keep == "largest":
        sizes = largest_reader(image_root, paths, warn, image_column)
        return ("first", None) if sizes is None else (keep, sizes)
    return keep, None


def listed_paths(table: pd.DataFrame, paths: np.ndarray, store: str | Path,
                 image_root: str | None, absolute: bool) -> np.ndarray:
    """The ``path`` column of the table's rows (joined to ``image_root`` when ``absolute``);
    PairkitError for a path a pipeline must not act on (a hand-edited store: ``--paths-only
    | xargs rm`` would)."""
    import numpy as np

    from pairkit.core.paths import first_bad_path

    out_paths = paths[table["id"].to_numpy()]
    bad = first_bad_path(out_paths)
    if bad is not None:
        row, value, reason = bad
        raise PairkitError(f"item path {value!a} {reason} (store {store}, id "
                           f"{int(table['id'].iloc[row])}): refusing to list it")
    if absolute:
        out_paths = np.array([str(inside(image_root, p)) for p in out_paths], dtype=object)
    return out_paths


def keep_reason_column(table: pd.DataFrame, keep: str, paths: np.ndarray, sizes: Any,
                       resized: dict[int, str]) -> list[str | None]:
    """The ``keep_reason`` column (:func:`pairkit.mine.keep_readers.keep_reasons`), with the
    resized-copy reason on the kept rows ``resized`` names."""
    from pairkit.mine.keep_readers import keep_reasons

    reasons = keep_reasons(table, keep, paths, getattr(sizes, "facts", None),
                           getattr(sizes, "sizes", None))
    for row, item in enumerate(table["id"].tolist()):
        if item in resized and table["keep"].iat[row]:
            reasons[row] = resized[item]
    return reasons


def inside(image_root: str, path: str) -> str:
    """``image_root / path`` (a URL root: the object's URL, never a mangled ``s3:/`` path);
    PairkitError when ``path`` would leave the image root."""
    from pairkit.core.paths import path_problem

    reason = path_problem(path)
    if reason is not None:
        raise PairkitError(f"item path {path!a} {reason}: refusing to print it as an "
                           "absolute path")
    from pairkit.core.remote import is_url, join

    if is_url(image_root):
        return join(image_root, path)
    return str(Path(image_root) / path)


def summary_line(s: dict[str, Any]) -> str:
    """The one line ``pairkit dedup`` prints on stderr."""
    share = s["items_in_groups"] / s["items"] if s["items"] else 0.0
    views = "" if s["sources"] == s["items"] else f" ({s['items_in_groups']} items with views)"
    how = "exact only" if s["exact_only"] else f"threshold {s['threshold']:g}"
    d = s.get("decision") or {}
    if d.get("method") == "pixels":
        cal = (f" calibrated on {d['copies']} copies of {d['images']} images"
               if d.get("copies") else "")
        how = f"pixels, aligned correlation >= {d['threshold']:.4f}{cal}"
        if d.get("raised"):
            how += (f" (raised from {d['copies_threshold']:.4f}: other images of this store "
                    f"score like copies; about {1 - d['expected_recall']:.0%} of copies "
                    "may be missed)")
    groups = "1 group" if s["groups"] == 1 else f"{s['groups']} groups"
    return (
        f"{groups}: {s['sources_in_groups']} of {s['sources']} sources in groups"
        f"{views}, {share:.1%} of the store; {s['drop']} to drop ({s['exact']} exact, "
        f"{s['near']} near copies), keep {s['keep']}, {how}, "
        f"{s['split']} chains split, {s['seconds']:.1f} s"
        + (f", search on {s['ray']}" if s.get("ray") else "")
    )


AGAINST_COLUMNS = ("id", "path", "other_id", "other_path", "similarity", "match")
AGAINST_DTYPES = ("int64", "str", "int64", "str", "float32", "str")


def run_against(store: str | Path, cfg: DedupConfig, other: str | Path,
                warn: Callable[[str], None] = lambda _: None,
                progress: Callable[[int], None] | None = None,
                on_start: Callable[[int], None] | None = None
                ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Sources of the store at ``store`` that duplicate a source of ``other`` (train/test leaks):
    exact by file hash, near by the same decision as :func:`run_dedup`, on the two stores
    together, pair by pair (:func:`~pairkit.mine.near_duplicates.cross_links`). Table: one
    row per leaking source of the store (``id``, ``path``), with its duplicate in
    ``other`` (``other_id``, ``other_path``): the same file when there is one (``match``
    exact, ``similarity`` 1.0), else the most similar (``match`` near, ``similarity`` of
    the stored vectors); and a summary. ``on_start``/``progress``: the progress hook, as
    in :func:`run_dedup` (over the sources of both stores)."""
    import numpy as np
    import pandas as pd

    from pairkit.core.store import Store
    from pairkit.encode.item_images import image_column_of
    from pairkit.mine.near_duplicate_check import (
        PixelCheck,
        ThresholdCheck,
        choose_check,
        images_readable,
        refuse_pixel_threshold,
    )
    from pairkit.mine.near_duplicates import cross_links
    from pairkit.mine.thresholds import reachable

    t = check_dedup(cfg)
    a, b = Store.open(store), Store.open(other)
    if a.dim != b.dim:
        raise UsageError(f"--against: {store} has {a.dim}-d vectors and {other} "
                         f"{b.dim}-d; embed both with one encoder")
    ea, eb = a.encoder.get("name"), b.encoder.get("name")
    if ea != eb:
        warn(f"--against: the stores were embedded with different encoders ({ea}, {eb}); "
             "their similarities are not comparable")
    ia, ib = a.items, b.items
    n_a = len(ia)
    vectors = np.concatenate([a.vectors(np.float32), b.vectors(np.float32)])
    paths = np.concatenate([ia["path"].to_numpy(dtype=object), ib["path"].to_numpy(dtype=object)])
    ra, rb = a.manifest.get("image_root"), b.manifest.get("image_root")
    if cfg.absolute and not (ra and rb):
        raise UsageError(f"--absolute needs both stores' image_root, and "
                         f"{store if not ra else other} has none (made by import?)")
    roots = np.array([ra] * n_a + [rb] * len(ib), dtype=object)
    ca, cb = image_column_of(a), image_column_of(b)  # dataset stores' image columns
    columns = np.array([ca] * n_a + [cb] * len(ib), dtype=object)
    sources = np.array(["a\0" + s for s in ia["source"].astype(str)] +
                       ["b\0" + s for s in ib["source"].astype(str)], dtype=object)
    hashes = np.concatenate([ia["file_sha256"].to_numpy(dtype=object, na_value=None),
                             ib["file_sha256"].to_numpy(dtype=object, na_value=None)])
    if cfg.exact_only:
        refuse_without_hashes(hashes[:n_a], store)
        refuse_without_hashes(hashes[n_a:], other)
    views = np.concatenate([ia["view"].to_numpy(), ib["view"].to_numpy()])
    both = images_readable(ra, paths[:n_a], image_column=ca) and \
        images_readable(rb, paths[n_a:], image_column=cb)
    if cfg.method == "pixels" and not both:
        raise UsageError("--method pixels needs both stores' images (image_root)")
    pixels = both and cfg.method != "threshold" and (cfg.threshold is None or
                                                     cfg.method == "pixels")
    if cfg.pixel_threshold is not None and not pixels:
        refuse_pixel_threshold(cfg.method, cfg.threshold)
    met = min(reachable(t, a.dtype), reachable(t, b.dtype))  # -t 1: identical rows
    if cfg.exact_only:
        check = ThresholdCheck(vectors, met)
    elif pixels:
        check = PixelCheck(vectors, paths, roots, threshold=cfg.pixel_threshold, fallback=met,
                           progress=progress, on_start=on_start, image_column=columns)
    else:
        check = choose_check(vectors, None, None, "threshold", met,
                             batch_size=cfg.batch_size, device=cfg.device,
                             backend=cfg.backend, progress=progress, on_start=on_start)
    rows = []
    for i, others, same in cross_links(vectors, n_a, check, file_sha256=hashes,
                                       sources=sources, views=views,
                                       near=not cfg.exact_only):
        sims = vectors[others] @ vectors[i]
        if same.any():  # the same file bytes name the copy, before any closer vector
            j, sim, match = int(others[same][0]), 1.0, "exact"
        else:
            best = int(np.argmax(sims))
            j, sim, match = int(others[best]), float(np.clip(sims[best], -1, 1)), "near"
        rows.append((i, paths[i], j - n_a, paths[j], sim, match))
    out = against_table(rows)
    for column, ids, part, root, where in (("path", "id", paths[:n_a], ra, store),
                                           ("other_path", "other_id", paths[n_a:], rb, other)):
        if len(out):  # refused as dedup refuses it; absolute with --absolute
            out[column] = listed_paths(pd.DataFrame({"id": out[ids]}), part, where, root,
                                       cfg.absolute).tolist()
    summary = {
        "leaks": len(out), "sources": int(ia["source"].nunique()) if n_a else 0,
        "other_sources": int(ib["source"].nunique()) if len(ib) else 0,
        "exact": int((out["match"] == "exact").sum()) if len(out) else 0,
        "decision": check.describe() if not cfg.exact_only else None,
        "exact_only": cfg.exact_only, "threshold": t,
    }
    return out, summary


def against_table(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """The ``--against`` table of ``rows`` (:data:`AGAINST_COLUMNS`) with the types
    dedup.md gives (``similarity`` float32), an empty table's too: its text columns typed
    as strings, so its parquet has no column of type null."""
    import numpy as np
    import pandas as pd

    cols: list[Any] = list(zip(*rows, strict=True)) if rows else [()] * len(AGAINST_COLUMNS)
    out = {}
    for name, values, dtype in zip(AGAINST_COLUMNS, cols, AGAINST_DTYPES, strict=True):
        if dtype != "str":
            out[name] = np.array(values, dtype=dtype)
        else:  # text as pandas makes it of Python strings; typed when there are none
            out[name] = pd.Series(list(values), dtype=None if rows else pd.StringDtype())
    return pd.DataFrame(out)


def against_line(s: dict[str, Any]) -> str:
    """The summary line of ``pairkit dedup --against``."""
    d = s.get("decision") or {}
    how = ("exact only" if s["exact_only"] else
           f"pixels, aligned correlation >= {d['threshold']:.4f}" if d.get("method") == "pixels"
           else f"threshold {s['threshold']:g}")
    return (f"{s['leaks']} of {s['sources']} sources duplicate one of the other store's "
            f"{s['other_sources']} ({s['exact']} exact), {how}, {s['seconds']:.1f} s")
