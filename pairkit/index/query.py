"""``pairkit search``: the nearest items of a store to queries (image files, item ids or
texts), as a table of (query, rank, neighbour, score)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.errors import PairkitError, UsageError
from pairkit.index.search import rounded_depths

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("store_id", "query", "query_kind", "rank", "id", "score", "path", "source",
           "label")


@dataclass(frozen=True)
class QueryRequest:
    """What to look up: image files, item ids, texts; ``k`` neighbours each. An item query
    leaves out the items of its own source unless ``include_same_source``."""

    images: tuple[str, ...] = ()
    ids: tuple[int, ...] = ()
    texts: tuple[str, ...] = ()
    k: int = 10
    include_same_source: bool = False
    device: str = "auto"
    checkpoint: str | None = None


def split_queries(queries: list[str]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Command-line QUERY words -> (image files, item ids): an existing file is an image,
    a whole number in ASCII digits an item id (not "３", which ``int`` would read as 3);
    anything else is bad usage."""
    import re
    from pathlib import Path

    images: list[str] = []
    ids: list[int] = []
    for q in queries:
        if Path(q).is_file():
            images.append(q)
        elif re.fullmatch(r"\s*\+?[0-9]+\s*", q, flags=re.ASCII):
            ids.append(int(q))
        elif Path(q).is_dir():
            raise UsageError(f"query {q} is a folder, not an image file")
        elif Path(q).exists():
            raise UsageError(f"query {q} is not a regular file (a device, a pipe or a "
                             "socket), not an image file")
        else:
            raise UsageError(f"query {q!r} is neither an image file nor an item id "
                             "(texts go after --text)")
    return tuple(images), tuple(ids)


# queries x k entries searched at once (scores and ids: ~100 MB)
QUERY_BLOCK_ENTRIES = 1 << 23
# an item query's own source of more rows than this is skipped by the search (exact:
# pairkit.index.open.Searcher.search_outside) rather than fetched and dropped
OVER_FETCH_SOURCE = 1024


def neighbours(vectors: np.ndarray, queries: np.ndarray, k: int, own: np.ndarray,
               sources: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(scores, ids)`` of each query: the exact search of ``queries`` in ``vectors``
    through the one search entry point (:func:`pairkit.index.open.exact_searcher`: best
    first, ties by id, -1 padding), at least ``k`` rows outside the query's ``own``
    source (-1: none) among them. A query fetches ``k`` + the size of *its own* source
    (not of the store's largest), or skips it when it is big; queries are searched in
    blocks of :data:`QUERY_BLOCK_ENTRIES` results."""
    from pairkit.index.open import exact_searcher

    n = len(vectors)
    searcher = exact_searcher(vectors)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    sizes = np.bincount(sources, minlength=1)
    extra = np.where(own >= 0, sizes[np.maximum(own, 0)], 0)
    skip = (extra > OVER_FETCH_SOURCE) & searcher.excludes
    extra = np.where(skip, 0, extra)
    ks = np.minimum(n, k + rounded_depths(extra))
    out: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.float32),
                                                 np.zeros(0, np.int64))] * len(queries)
    for kk in np.unique(ks):
        for skipping in (False, True):
            sel = np.flatnonzero((ks == kk) & (skip == skipping))
            step = max(1, QUERY_BLOCK_ENTRIES // int(kk))
            for b in range(0, len(sel), step):
                rows = sel[b:b + step]
                if skipping:
                    sc, ids = searcher.search_outside(queries[rows], int(kk), own[rows],
                                                      sources)
                else:
                    sc, ids = searcher.search(queries[rows], int(kk))
                for j, q in enumerate(rows):
                    out[q] = (sc[j], ids[j])
    return out


def search_store(store: Any, req: QueryRequest) -> pd.DataFrame:
    """Look up ``req`` in ``store``; one row per (query, neighbour), columns
    :data:`COLUMNS`, queries in the order images, ids, texts, ``rank`` 0 = nearest."""
    if req.k < 1:
        raise UsageError(f"-k must be >= 1, got {req.k}")
    if not (req.images or req.ids or req.texts):
        raise UsageError("give at least one query: image files, item ids or --text TEXT")
    if req.checkpoint is not None and not (req.images or req.texts):
        raise UsageError("--checkpoint applies to image and text queries (the store's "
                         "encoder), not to item ids")
    n = store.count
    if n == 0:
        raise PairkitError(f"store {store.root} is empty: nothing to search")
    k = min(req.k, n)  # never more rows than the store holds (a k past 2**63 overflowed)
    bad = [i for i in req.ids if not 0 <= i < n]
    if bad:
        raise UsageError(f"item id {bad[0]} is not in store {store.root} (ids 0..{n - 1})")
    parts: list[np.ndarray] = []
    request = None
    if req.images or req.texts:
        from dataclasses import replace

        from pairkit.core.devices import resolve_device
        from pairkit.encode.query import encoder_request

        # the manifest's refusals first: resolving the device imports torch
        request = encoder_request(store, req.device, req.checkpoint)
        if req.texts:
            from pairkit.encode.registry import split_model_name

            if split_model_name(request.model)[0] != "openclip":
                raise UsageError(f"text queries need an open_clip store; {store.root} was "
                                 f"embedded with {request.model}, which has no text tower")
        request = replace(request, device=resolve_device(req.device))
    vectors = store.vectors(np.float32)
    if req.images:
        from pairkit.encode.query import encode_images

        parts.append(encode_images(request, list(req.images)))
    if req.ids:
        parts.append(vectors[np.asarray(req.ids, dtype=np.int64)])
    if req.texts:
        from pairkit.encode.query import encode_texts

        parts.append(encode_texts(request, list(req.texts)))
    queries = np.concatenate(parts)
    if queries.shape[1] != store.dim:
        raise PairkitError(f"the encoder gives dim {queries.shape[1]}, store {store.root} "
                           f"has dim {store.dim}")
    sources = store.source_codes()
    own = np.full(len(queries), -1, dtype=np.int64)
    ni = len(req.images)
    if req.ids and not req.include_same_source:
        own[ni:ni + len(req.ids)] = sources[np.asarray(req.ids, dtype=np.int64)]
    found = neighbours(vectors, queries, k, own, np.asarray(sources, dtype=np.int64))
    items = store.items
    labels = items["label"].to_numpy(dtype=object, na_value=None)
    names = ([str(p) for p in req.images] + [f"id:{i}" for i in req.ids] + list(req.texts))
    kinds = ["image"] * ni + ["item"] * len(req.ids) + ["text"] * len(req.texts)
    import pandas as pd

    rows: list[tuple[Any, ...]] = []
    alone: list[str] = []  # item queries whose every candidate is of their own source
    for q, (scores, ids) in enumerate(found):
        keep = ids >= 0
        if own[q] >= 0:
            keep &= sources[np.maximum(ids, 0)] != own[q]
        hit_ids, hit_scores = ids[keep][:k], scores[keep][:k]
        if not len(hit_ids):
            alone.append(names[q])
        for rank, (i, s) in enumerate(zip(hit_ids, hit_scores, strict=True)):
            rows.append((names[q], kinds[q], rank, int(i), float(s)))
    table = pd.DataFrame(rows, columns=list(COLUMNS[1:6]))
    table.insert(0, "store_id", store.content_id)
    table["rank"] = table["rank"].astype(np.int64)
    table["id"] = table["id"].astype(np.int64)
    # a cosine: float16 rows against a float32 query can come out a hair above 1
    table["score"] = table["score"].clip(-1.0, 1.0).astype(np.float32)
    hit = table["id"].to_numpy()
    table["path"] = items["path"].to_numpy(dtype=object)[hit]
    table["source"] = items["source"].to_numpy(dtype=object)[hit]
    table["label"] = pd.array(labels[hit], dtype="string")
    table.attrs["no_neighbours"] = alone
    return table
