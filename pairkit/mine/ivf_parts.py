"""``mine --ray`` with the IVF lists split over the workers: each worker holds the rows of
a share of the lists, never the whole index.

The search of the parts path (:mod:`pairkit.mine.parts_run`) is the float16 IVF of
:class:`pairkit.index.half_ivf.HalfIvf` searched list-major
(:func:`pairkit.index.search.list_major_search` under
:func:`pairkit.index.search.knn_search`). Here the same search is cut by lists, the way
FAISS's list-major search and SemDeDup cut theirs:

1. **Plan** (where the blocks are planned: a Ray task, or here): the quantizer trained by
   the same call on the same seeded sample (:func:`pairkit.index.faiss_build.trained_ivf`),
   every row assigned to its cell in one streamed pass over the shards, block for block
   as :func:`pairkit.index.half_ivf.build_half_ivf` does
   (:func:`pairkit.index.half_ivf.assign_cells`), and the row ids of every cell kept
   (:class:`IvfLists`: 4 bytes a row below 2^31 rows, 8 above; no vector). The cells are
   cut into ``P`` partitions, runs of consecutive cells of about ``N / P`` rows each.
2. **Search by partition** (:func:`search_partition`, one task per partition): the worker
   reads from the shards the rows of its partition's cells only
   (:func:`partition_index`: a :class:`~pairkit.index.half_ivf.HalfIvf` whose other cells
   are empty), then for every block of anchors reads their rows and searches them: each
   anchor is scored against the cells of its ``nprobe`` probes that the partition holds,
   by the same matrix products as the whole index (the same queries per cell), and the
   partition's exact top-``k0`` (score, then lowest id: ``knn_search``'s order) of the
   anchors that probe it is written beside the run's parts (``.cand-BBBBB-PPPPP.npz``; on
   object storage ``.cand-BBBBB-PPPPP-TOKEN.npz`` beside the dataset's parts, removed
   when the blocks are done).
3. **Merge and mine** (the blocks of :func:`pairkit.mine.block_parts.mine_block_part`,
   unchanged): the blocks' searcher is a :class:`ListCandidates`, which answers a block's
   first search by merging its partitions' files (:func:`merge_top`: the top ``k0`` of
   the union in the same order is the top ``k0`` of the whole index, since each file
   holds its partition's exact top ``k0``), and a retry's deeper search (anchors short of
   negatives) by searching the short anchors' probed cells one partition at a time
   (:func:`search_cells`): never more than one partition's rows at a time. From object
   storage the blocks read their anchors' and positives' rows by byte ranges when those
   lie together (:func:`blocks_read_by_ranges`), so no worker holds the store.

The table and the stats are the parts path's (tests/mine/test_ivf_parts.py,
tests/distributed/test_ray.py). Used by ``mine --ray`` without false-negative rules or
mined positives, to a local parquet output or a dataset on object storage, when the
search is such a float16 IVF (:func:`lists_spec`); the other runs keep the index built on
each worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pairkit.index.options import IndexOptions


def lists_spec(n: int, dim: int, options: IndexOptions) -> IndexOptions | None:
    """The resolved options of the search :func:`pairkit.index.open.open_searcher` builds
    over ``n`` rows of ``dim`` read in place on the CPU when it is a
    :class:`~pairkit.index.half_ivf.HalfIvf` (``ivf``, by choice or by ``auto`` above
    its row limit, not float16, lists of >= 256 rows on average:
    :func:`pairkit.index.faiss_build.build_index`); else None."""
    from pairkit.index.open import engine_for

    where = engine_for(options)
    if where.name == "torch" or where.gpu:
        return None
    if options.cpu_kind(n) != "ivf" or options.float16:
        return None
    from dataclasses import replace

    spec = replace(options, kind="ivf").resolved(n, dim)
    return spec if n >= 256 * int(spec.nlist or 1) else None


@dataclass
class IvfLists:
    """The plan of the cells (module docstring, step 1): the quantizer's ``centroids``
    (nlist, d) float32, ``nprobe``, ``offsets`` (nlist + 1,) where each cell starts in
    ``ids`` (the row ids cell by cell, ascending within a cell, as a ``HalfIvf`` lays them
    out), ``n`` rows in all, and ``parts``: the partitions' cell ranges ``(c0, c1)``."""

    centroids: np.ndarray
    nprobe: int
    offsets: np.ndarray
    ids: np.ndarray
    parts: list[tuple[int, int]]
    n: int
    quantizer_: Any = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["quantizer_"] = None  # made again where it is used
        return state

    @property
    def nlist(self) -> int:
        return int(len(self.offsets) - 1)

    @property
    def quantizer(self) -> Any:
        """The cells' FAISS ``IndexFlatIP`` (the trained quantizer's centroids: the same
        searches)."""
        if self.quantizer_ is None:
            from pairkit.core.threads import import_faiss

            faiss = import_faiss()
            q = faiss.IndexFlatIP(int(self.centroids.shape[1]))
            q.add(np.ascontiguousarray(self.centroids, dtype=np.float32))
            self.quantizer_ = q
        return self.quantizer_

    def part_rows(self, p: int) -> int:
        """Rows of partition ``p``."""
        c0, c1 = self.parts[p]
        return int(self.offsets[c1] - self.offsets[c0])


def plan_lists(rows: Any, spec: IndexOptions, partitions: int) -> IvfLists:
    """:class:`IvfLists` of ``rows`` (N, d; read in place) for the resolved ``ivf``
    ``spec``, cut into ``partitions`` (at most one per cell)."""
    from pairkit.index.faiss_build import trained_ivf
    from pairkit.index.half_ivf import assign_cells, cell_offsets

    _, quantizer = trained_ivf(rows, spec)
    nlist = int(quantizer.ntotal)
    cells = assign_cells(rows, quantizer)
    offsets = cell_offsets(cells, nlist)
    ids = np.argsort(cells, kind="stable").astype(np.int32 if len(rows) < 2**31 else np.int64)
    del cells
    centroids = quantizer.reconstruct_n(0, nlist)
    return IvfLists(centroids, int(spec.nprobe or 1), offsets, ids,
                    split_cells(offsets, partitions), len(rows), quantizer)


def split_cells(offsets: np.ndarray, partitions: int) -> list[tuple[int, int]]:
    """The cells (``offsets``: where each starts, the last the row count) cut into
    ``partitions`` runs of consecutive cells (at most one per cell, at least one cell
    each) of about equal rows: ``(c0, c1)`` per partition."""
    nlist = len(offsets) - 1
    p_count = max(1, min(int(partitions), nlist))
    n = int(offsets[-1])
    bounds = [0]
    for p in range(1, p_count):
        c = int(np.searchsorted(offsets, n * p / p_count))  # first boundary at or past it
        if c > 0 and abs(offsets[c - 1] - n * p / p_count) < abs(offsets[c] - n * p / p_count):
            c -= 1
        bounds.append(max(bounds[-1] + 1, min(c, nlist - (p_count - p))))
    bounds.append(nlist)
    return [(bounds[i], bounds[i + 1]) for i in range(p_count)]


def partition_index(rows: Any, lists: IvfLists, cells: np.ndarray) -> Any:
    """A :class:`~pairkit.index.half_ivf.HalfIvf` holding the rows of ``cells`` only (read
    from ``rows`` by id, in id order, in their stored dtype), the other cells empty: its
    search is the whole index's restricted to those cells (same scores, same order)."""
    from pairkit.index.half_ivf import HalfIvf

    cells = np.asarray(cells, dtype=np.int64)
    counts = np.zeros(lists.nlist, dtype=np.int64)
    counts[cells] = lists.offsets[cells + 1] - lists.offsets[cells]
    offsets = np.zeros(lists.nlist + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    ids = np.concatenate([np.zeros(0, lists.ids.dtype)]
                         + [lists.ids[lists.offsets[c]:lists.offsets[c + 1]]
                            for c in np.sort(cells)])
    order = np.argsort(ids, kind="stable")  # read in id order: shard by shard
    codes = np.empty((len(ids), rows.shape[1]), dtype=rows.dtype)
    # a piece at a time: one read of every row at once would hold them twice
    step = max(1, READ_BYTES // max(1, codes.shape[1] * codes.itemsize))
    for s in range(0, len(ids), step):
        at = order[s:s + step]
        codes[at] = rows[ids[at].astype(np.int64)]
    return HalfIvf(lists.quantizer, lists.nprobe, codes, ids, offsets)


READ_BYTES = 64 << 20  # a partition's rows read this many bytes at a time


def merge_top(partials: list[tuple[np.ndarray, np.ndarray]], k: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` of the union of ``partials`` (each ``(scores, ids)`` (nq, k_i), -inf
    / -1 padded) by score, then lowest id (:func:`pairkit.index.search.sort_results`'s
    order), -1 / -inf padded: the exact top ``k`` of the union when each partial holds
    its own set's exact top ``k`` (or all of it)."""
    from pairkit.index.search import sort_results

    nq = len(partials[0][0]) if partials else 0
    best_s = np.full((nq, k), -np.inf, np.float32)
    best_i = np.full((nq, k), -1, np.int64)
    for s, i in partials:
        s, i = sort_results(np.concatenate([best_s, np.asarray(s, np.float32)], axis=1),
                            np.concatenate([best_i, np.asarray(i, np.int64)], axis=1))
        best_s, best_i = s[:, :k], i[:, :k]
    return best_s, best_i


def partial_search(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``knn_search`` of ``queries`` in the partial ``index`` (:func:`partition_index`):
    the exact top ``k`` of the cells it holds among each query's probes, -1 / -inf padded
    to ``k`` columns."""
    from pairkit.index.search import knn_search

    return knn_search(queries, index, k)


CANDIDATES = ("rows", "ids", "scores")  # the arrays of a partition's candidates file


def candidates_path(folder: str, block: int, part: int, token: str = "") -> Path | str:
    """The file of partition ``part``'s candidates of block ``block`` beside the run's
    parts (:func:`pairkit.core.side_files.side_path`: ``.cand-BBBBB-PPPPP.npz``, on
    object storage with the writer's ``token``)."""
    from pairkit.core.side_files import side_path

    return side_path(folder, f"cand-{block:05d}-{part:05d}", ".npz", token)


def write_candidates(path: Path | str, rows: np.ndarray, ids: np.ndarray,
                     scores: np.ndarray) -> None:
    """Write a partition's candidates of one block (atomically: one object put whole, or
    a file renamed into place)."""
    from pairkit.core.side_files import write_arrays

    write_arrays(path, dict(zip(CANDIDATES, (rows, ids, scores), strict=True)))


def read_candidates(path: Path | str) -> dict[str, np.ndarray]:
    """:func:`write_candidates`' arrays (``rows``, ``ids``, ``scores``)."""
    from pairkit.core.side_files import read_arrays

    return read_arrays(path, CANDIDATES)


def write_top(path: Path | str, s: np.ndarray, i: np.ndarray) -> int:
    """Write a partition's top ``(s, i)`` of a block of queries (:func:`partial_search`'s)
    to ``path``: the queries it answered (a first id >= 0), their ids and scores. Returns
    how many it answered."""
    hit = np.flatnonzero(i[:, 0] >= 0) if i.shape[1] else np.zeros(0, np.int64)
    write_candidates(path, hit.astype(np.int32), i[hit], s[hit])
    return len(hit)


def merged_top(paths: list[Path | str], nq: int, width: int, k: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` (:func:`merge_top`) of the partitions' files ``paths`` of one block of
    ``nq`` queries, each written by :func:`write_top` with at most ``width`` columns (a
    query a file does not answer: no candidate from that partition)."""
    partials = []
    for path in paths:
        f = read_candidates(path)
        s = np.full((nq, width), -np.inf, np.float32)
        i = np.full((nq, width), -1, np.int64)
        s[f["rows"], :f["ids"].shape[1]] = f["scores"]
        i[f["rows"], :f["ids"].shape[1]] = f["ids"]
        partials.append((s, i))
    return merge_top(partials, k)


def remove_candidates(url: str, blocks: int, parts: int, token: str) -> None:
    """Remove the run's candidate objects beside the dataset at ``url`` (best effort:
    any left over go with the writer's token; a local run's candidates go with its parts
    folder)."""
    from pairkit.core.side_files import remove_objects

    remove_objects(candidates_path(url, b, p, token)
                   for b in range(blocks) for p in range(parts))


@dataclass(frozen=True)
class PartitionDone:
    """What :func:`search_partition` sends back: the partition, its rows read (its cells'
    rows only) and the anchors it answered."""

    part: int
    rows: int
    anchors: int


def search_partition(job: Any, part: int) -> PartitionDone:
    """Step 2 of the module docstring for partition ``part`` of the run ``job`` (a
    :class:`pairkit.mine.block_parts.PartsJob` whose blocks' searcher is a
    :class:`ListCandidates`): its cells' rows read from the store's shards, every block
    of anchors searched against them, each block's candidates written atomically (a
    partition searched again writes the same files)."""
    from pairkit.core.blocks_here import block_spans

    st = job.blocks
    cand: ListCandidates = st.anchor_searcher
    lists = cand.lists
    rows = cand.rows_from.load()
    c0, c1 = lists.parts[part]
    index = partition_index(rows, lists, np.arange(c0, c1))
    k = min(st.k0, lists.n)
    answered = 0
    for number, (b0, b1) in enumerate(block_spans(len(st.anchors), cand.batch_size)):
        queries = np.asarray(rows[st.anchors[b0:b1]], dtype=np.float32)
        s, i = partial_search(index, queries, k)
        answered += write_top(candidates_path(cand.folder, number, part, cand.token), s, i)
    return PartitionDone(part, int(index.ntotal), answered)


class ListCandidates:
    """The blocks' searcher (``anchor_searcher``: called with anchor ids) of a run whose
    lists are split (step 3 of the module docstring): a block's first search merges its
    partitions' files; any other (deeper retries) searches the probed cells one partition
    at a time. Pickled without what it has read."""

    def __init__(self, lists: IvfLists, rows_from: Any, folder: str, anchors: np.ndarray,
                 batch_size: int, first_k: int, token: str = "") -> None:
        self.lists, self.rows_from, self.folder = lists, rows_from, folder
        self.token = token  # the writer's, when ``folder`` is a dataset's URL
        self.anchors, self.batch_size = anchors, int(batch_size)
        self.first_k = int(first_k)  # the blocks' first k (k0): answered from the files
        self.order: np.ndarray | None = None
        self.merged: tuple[int, np.ndarray, np.ndarray] | None = None  # block, s, i

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "order": None, "merged": None}

    @property
    def parts(self) -> int:
        return len(self.lists.parts)

    def positions(self, a: np.ndarray) -> np.ndarray:
        """Where the anchor ids ``a`` are in ``anchors``."""
        if self.order is None:
            self.order = np.argsort(self.anchors, kind="stable")
        order: np.ndarray = self.order
        return np.asarray(order[np.searchsorted(self.anchors[order], a)])

    def block(self, number: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Block ``number``'s merged candidates (``k`` columns), read once."""
        if self.merged is None or self.merged[0] != number:
            b0 = number * self.batch_size
            nq = min(len(self.anchors), b0 + self.batch_size) - b0
            paths = [candidates_path(self.folder, number, p, self.token)
                     for p in range(self.parts)]
            self.merged = (number, *merged_top(paths, nq, k, k))
        return self.merged[1], self.merged[2]

    def __call__(self, a: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        at = self.positions(np.asarray(a))
        number = int(at[0]) // self.batch_size if len(at) else 0
        first = k == self.first_k and len(at) and \
            bool((at // self.batch_size == number).all())
        if first:
            kk = min(k, self.lists.n)
            s, i = self.block(number, kk)
            rows = at - number * self.batch_size
            return pad(s[rows], i[rows], k)
        rows = self.rows_from.load()
        x = np.asarray(rows[np.asarray(a)], dtype=np.float32)
        return search_cells(rows, self.lists, x, k)


def pad(s: np.ndarray, i: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(s, i)`` padded with -inf / -1 to ``k`` columns (as ``Searcher.search``)."""
    if s.shape[1] < k:
        extra = ((0, 0), (0, k - s.shape[1]))
        s = np.pad(s, extra, constant_values=-np.inf)
        i = np.pad(i, extra, constant_values=-1)
    return s, i


def search_cells(rows: Any, lists: IvfLists, x: np.ndarray, k: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The search of the whole index (``knn_search`` of ``x`` for ``k``, padded as
    ``Searcher.search``) made one partition at a time, each reading only the cells of
    its range that ``x``'s queries probe: never more than one partition's rows held."""
    from pairkit.index.half_ivf import queries_per_pass
    from pairkit.index.search import as_float32

    kk = min(k, lists.n)
    if len(x) == 0 or kk == 0:
        return pad(np.zeros((len(x), 0), np.float32), np.zeros((len(x), 0), np.int64), k)
    step = queries_per_pass(lists.nprobe)
    probed = np.zeros(lists.nlist, dtype=bool)
    for start in range(0, len(x), step):  # the probes as knn_search's passes make them
        _, assign = lists.quantizer.search(as_float32(x[start:start + step]), lists.nprobe)
        probed[assign[assign >= 0]] = True
    partials = []
    for c0, c1 in lists.parts:
        cells = c0 + np.flatnonzero(probed[c0:c1])
        if len(cells):
            partials.append(partial_search(partition_index(rows, lists, cells), x, kk))
    return pad(*merge_top(partials, kk), k)


def blocks_read_by_ranges(anchors: np.ndarray, offsets: np.ndarray, pos_ids: np.ndarray,
                          batch_size: int, n: int, row_bytes: int, block_bytes: int) -> bool:
    """Whether the blocks of anchors of a run whose lists are split should read their rows
    from object storage by byte ranges rather than fetch the store whole and hold it:
    their only reads are their anchors' rows and those of the anchors' positives
    (``offsets``, ``pos_ids``: each anchor's positive set), so a block fetches the
    ``block_bytes`` blocks of the store those rows lie in. Yes when those blocks, summed
    over the blocks of anchors, come to at most twice the store's (the views of a source
    side by side, as ``embed`` writes them); no when the positives are scattered over the
    store (a ``pairs:`` relation in another order), where every block would fetch most
    of it again."""
    per = max(1, block_bytes // max(1, row_bytes))
    store_blocks = -(-max(n, 1) // per)
    touched = 0
    for b0 in range(0, len(anchors), max(1, batch_size)):
        b1 = min(len(anchors), b0 + batch_size)
        ids = np.concatenate([anchors[b0:b1], pos_ids[offsets[b0]:offsets[b1]]])
        touched += len(np.unique(ids // per))
        if touched > 2 * store_blocks:
            return False
    return True


def checked_block_bytes(manifest: dict[str, Any]) -> int:
    """The bytes of the pieces a ranged read of the store fetches and checks (its first
    shard's block checksums; :data:`pairkit.core.manifest.SHARD_BLOCK_BYTES` for a store
    written without them)."""
    from pairkit.core.manifest import SHARD_BLOCK_BYTES

    shards = manifest.get("shards") or [{}]
    return int((shards[0].get("blocks") or {}).get("bytes") or SHARD_BLOCK_BYTES)


def lists_partitions(n: int, dim: int, spec: IndexOptions, workers: int) -> int:
    """Partitions for ``n`` rows of ``dim`` (``spec``: resolved ``ivf`` options): one per
    worker (``workers``), more when a partition's rows (float16) would pass
    :data:`PART_BYTES`, at most one per cell."""
    by_bytes = math.ceil(n * dim * 2 / PART_BYTES)
    return max(1, min(int(spec.nlist or 1), max(int(workers), by_bytes)))


PART_BYTES = 1 << 30  # a partition's rows (float16) above this: more partitions
