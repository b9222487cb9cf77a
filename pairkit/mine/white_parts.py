"""``mine --ray`` with the rules: the whitened neighbour lists searched by the workers,
their IVF lists split as the blocks' are (:mod:`pairkit.mine.ivf_parts`), and the
``cluster`` rule's assignment of every row to its sample's cells made by the same
workers, block by block.

The ``mutual-neighbour`` rule and the mined positives read every row's nearest rows of
other sources in the partial whitening of the store (:mod:`pairkit.mine.whitening`). That
search is a self-join of the whole store: made by the one task that plans a run with the
rules (:mod:`pairkit.mine.rules_plan`), it was the part of the plan that grows with the
collection in time (every row's probes scanned in one process). Here it is cut by lists:

1. **Plan** (:func:`plan_white`: a Ray task, or here): the whitening fitted on its seeded
   sample (:func:`pairkit.mine.whitening.fit_whitening`, the same call), the space the
   search runs in (:func:`space_rows`: the whitened rows, or their leading components
   when the candidates are re-ranked), and the lists of that space as the whole index
   would hold them (:func:`pairkit.mine.ivf_parts.plan_lists`: the quantizer trained on
   the same sample, every row's cell, the cells cut into partitions). No row is kept:
   the space is computed from the store's rows when read. With the ``cluster`` rule,
   also the rule's spectral embedding of its sample and the sample's small cells
   (:class:`CellsPlan`: what the rule fits on a sample, by the same calls).
2. **Search by partition** (:func:`search_white_partition`, one task per partition):
   the worker reads its cells' rows from the store, computes their place in the space,
   and searches every row of the store against them, :data:`QUERY_BLOCK` rows at a
   time; each block's exact top of the partition is written beside the run's parts
   (``.white-BBBBB-PPPPP.npz``). Every ``P``-th block of rows (``P`` partitions) also
   gets its rows' nearest cells (``.cells-BBBBB.npz``): the assignment that extends the
   rule's runs and coordinates from the sample to every row. The rows of a source of
   more than ``OVER_FETCH_ROWS`` rows are searched deeper (m + its size) into files of
   their own (``.whitedeep-BBBBB-PPPPP.npz``), every other row m + the largest of the
   rest (:func:`list_depths`).
3. **Merge** (:class:`SplitWhiteSearch`, the search the plan's
   :func:`pairkit.mine.whitening.whitened_neighbours` calls): each block's files merged
   (:func:`pairkit.mine.ivf_parts.merge_top`: the whole index's top) and cut to the rows
   of other sources as the search here does
   (:func:`pairkit.mine.rules_run.search_neighbour_lists`); the rule's embedding gets
   the workers' cells (:func:`spectral_of`) instead of reading every row for them.

Used when the rules read the whitened lists (the ``mutual-neighbour`` rule or mined
positives: the defaults) and the space's search would be such an IVF
(:func:`pairkit.mine.ivf_parts.lists_spec`: ``--index ivf``, or ``auto`` above its row
limit); the lists, the cells, and so the rules' flags and the table, are the plan's own
(tests/mine/test_white_parts.py, tests/distributed/test_ray.py). What stays in the plan:
the merge (every row's lists, as before) and the rows' codes from the cells.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from pairkit.mine.ivf_parts import IvfLists

QUERY_BLOCK = 131_072  # rows searched at a time, one candidates file per block and partition


@dataclass(frozen=True)
class Space:
    """The space the whitened neighbours are searched in: ``white``'s rows
    (:meth:`~pairkit.mine.whitening.Whitening.apply`), or their first ``dims``
    components re-normalised when ``rerank`` (the candidates are re-ranked in all of
    them: :func:`pairkit.mine.whitening.whitened_neighbours`)."""

    white: Any  # Whitening
    rerank: bool
    dims: int

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return space_rows(rows, self)


def space_rows(rows: np.ndarray, space: Space) -> np.ndarray:
    """``rows`` (the store's) in ``space``: float32 (n, space.dims), the same values the
    search here gets (the whitened rows, or their leading components re-normalised)."""
    from pairkit.mine.whitening import leading_normalised

    full = space.white.apply(rows)
    return leading_normalised(full, space.dims) if space.rerank else full


@dataclass
class CellsPlan:
    """The ``cluster`` rule's spectral embedding of the store's sample (``spectral``: its
    ``reduced`` the store's rows in the principal components, computed when read, which
    pickles as the store's address), made with the lists' plan by the call the rule
    makes, and the sample's small cells for ``seed`` (``cell_of``, ``centroids``:
    :func:`pairkit.mine.spectral.sample_cells`): what the workers need to give each row
    outside the sample its nearest cell (the rule's runs and coordinates extend by it),
    block by block, instead of the plan reading every row for it."""

    spectral: Any
    seed: int
    cell_of: np.ndarray
    centroids: np.ndarray


@dataclass
class WhiteLists:
    """The plan of step 1 (module docstring): the ``space``, the ``lists`` of its IVF,
    ``k`` the columns each row's search keeps (the depth asked plus the most views of a
    source), where the store is read (``rows_from``) and the candidate files written
    (``folder``, with the writer's ``token`` on object storage); ``cells``: the cluster
    rule's sample (None: the run has no cluster rule, or its sample is the store)."""

    space: Space
    lists: IvfLists
    k: int
    rows_from: Any
    folder: str
    token: str = ""
    cells: CellsPlan | None = None
    # the rows of the big sources (pairkit.mine.clusters.big_source_rows), searched
    # ``deep`` deep into files of their own (deep_path); every other row ``k`` deep
    deep: int = 0
    deep_rows: np.ndarray | None = None

    @property
    def parts(self) -> int:
        return len(self.lists.parts)

    @property
    def blocks(self) -> int:
        return -(-self.lists.n // QUERY_BLOCK)

    def view(self) -> Any:
        """The store's rows in the space, computed when read (no array of them)."""
        from pairkit.core.row_view import RowView

        return RowView(self.rows_from, fn=self.space, dim=self.space.dims,
                       rows=self.rows_from.load())


def needs_white(fn_config: Any, positives: Any) -> bool:
    """Whether a run's rules read the whitened neighbour lists: the ``mutual-neighbour``
    rule, or mined positives found in the whitening."""
    from pairkit.mine.rules.mutual import NAME

    if fn_config is not None and NAME in fn_config.rules:
        return True
    return positives is not None and positives.per_anchor > 0 and positives.whitening > 0


def plan_white(spec: Any, workers: int, partitions: int
               ) -> tuple[WhiteLists | None, dict[str, Any]]:
    """``(WhiteLists, info)`` of the run ``spec`` (a
    :class:`pairkit.mine.parts_run.PlanSpec` with rules that read the whitened lists):
    step 1 of the module docstring, the lists cut into ``partitions`` (0: one per worker
    of ``workers``, more for big ones: :func:`pairkit.mine.ivf_parts.lists_partitions`).
    ``(None, info)`` when the space's search here would not be a split-able IVF (the plan
    searches it itself). ``info``: ``parts`` (0 for None) and ``seconds``."""
    import time

    from pairkit.core.row_view import RowView
    from pairkit.index.options import IndexOptions
    from pairkit.mine.ivf_parts import lists_partitions, lists_spec, plan_lists
    from pairkit.mine.parts_run import lists_rows
    from pairkit.mine.rules_run import rule_lists_config
    from pairkit.mine.whitening import CANDIDATE_DIMS, fit_whitening

    t0 = time.perf_counter()
    rules = spec.rules
    from pairkit.mine.positives import capped_neighbours

    st = spec.rows_from.open(verify=True)
    cfg = capped_neighbours(rule_lists_config(rules.positives), st.source_codes())
    # read as float32; where the workers read them: by byte ranges from object storage
    # (a partition's cells, each block of queries, its rows' cells), nothing held
    reads = lists_rows(spec.rows_from)
    rows = RowView(reads, rows=st.rows(), dim=st.dim)
    index: IndexOptions = rules.index
    white = fit_whitening(rows, power=cfg.whitening, seed=index.seed)
    rerank = white.dims > CANDIDATE_DIMS
    space = Space(white, rerank, CANDIDATE_DIMS if rerank else white.dims)
    n = st.count
    lspec = lists_spec(n, space.dims, index)
    if lspec is None:
        return None, {"parts": 0, "seconds": round(time.perf_counter() - t0, 3)}
    sources = st.source_codes()
    depth = 3 * cfg.neighbours if rerank else cfg.neighbours
    count = partitions or lists_partitions(n, space.dims, lspec, workers)
    count = max(1, min(count, int(lspec.nlist or 1)))
    lists = plan_lists(rows.mapped(space, space.dims), lspec, count)
    k, deep, deep_rows = list_depths(sources, depth)
    job = WhiteLists(space, lists, k, reads,
                     spec.folder, spec.remote.token if spec.remote is not None else "",
                     cells_plan(rows, sources, rules.fn_config, spec.config.seed, white),
                     deep, deep_rows)
    deep_blocks = ([] if deep_rows is None
                   else [int(b) for b in np.unique(deep_rows // QUERY_BLOCK)])
    return job, {"parts": job.parts, "blocks": job.blocks, "cells": job.cells is not None,
                 "deep_blocks": deep_blocks, "seconds": round(time.perf_counter() - t0, 3)}


def list_depths(sources: np.ndarray, m: int) -> tuple[int, int, np.ndarray | None]:
    """``(k, deep, deep_rows)``: how deep the rows are searched for ``m`` rows of other
    sources (:func:`pairkit.mine.clusters.approximate_widths`): every row ``k`` (m + the
    largest source, as before, without a source over ``OVER_FETCH_ROWS`` rows), else the
    rows of such sources ``deep`` (m + the largest of them) and every other row ``k``
    (m + the largest of the rest): one source of 10,000 views made every row of every
    block fetch 10,000 more from every partition."""
    from pairkit.mine.clusters import approximate_widths, big_source_rows

    n = len(sources)
    widths = approximate_widths(sources, m)
    big = big_source_rows(sources)
    if not big.any():
        return int(widths.max(initial=min(n, m + 1))), 0, None
    return (int(widths[~big].max(initial=min(n, m + 1))), int(widths[big].max()),
            np.flatnonzero(big))


def deep_path(folder: str, block: int, part: int, token: str = "") -> Path | str:
    """The file of partition ``part``'s candidates of the big sources' rows of block
    ``block`` (``.whitedeep-BBBBB-PPPPP.npz``; its rows: positions among those rows)."""
    from pairkit.core.side_files import side_path

    return side_path(folder, f"whitedeep-{block:05d}-{part:05d}", ".npz", token)


def block_deep_rows(job: WhiteLists, lo: int, hi: int) -> np.ndarray:
    """The big sources' rows of the block of rows ``lo .. hi - 1`` (ascending)."""
    if job.deep_rows is None:
        return np.zeros(0, np.int64)
    a, b = np.searchsorted(job.deep_rows, [lo, hi])
    return job.deep_rows[a:b]


def cells_plan(rows: Any, sources: np.ndarray, fn_config: Any, seed: int,
               principal: Any = None) -> CellsPlan | None:
    """The :class:`CellsPlan` of ``rows`` (the store's, read as float32) when the run's
    rules have the ``cluster`` rule and the store is larger than its spectral sample.
    ``principal``: the lists' whitening, whose principal components the rule's graph
    starts from (:func:`pairkit.mine.view_whitening.view_whitened_rows`)."""
    from pairkit.mine.rules.cluster import NAME
    from pairkit.mine.spectral import sample_cells, spectral_embedding

    if fn_config is None or NAME not in fn_config.rules:
        return None
    emb = spectral_embedding(rows, sources, m=fn_config.cluster_neighbours, seed=seed,
                             principal=principal)
    if len(emb.rows) == len(rows):
        return None
    return CellsPlan(emb, seed, *sample_cells(emb, seed=seed))


def cells_path(folder: str, block: int, token: str = "") -> Path | str:
    """The nearest cells of query block ``block``'s rows outside the sample
    (``.cells-BBBBB.npz``)."""
    from pairkit.core.side_files import side_path

    return side_path(folder, f"cells-{block:05d}", ".npz", token)


def white_path(folder: str, block: int, part: int, token: str = "") -> Path | str:
    """Partition ``part``'s candidates of query block ``block`` beside the run's parts
    (:func:`pairkit.core.side_files.side_path`: ``.white-BBBBB-PPPPP.npz``)."""
    from pairkit.core.side_files import side_path

    return side_path(folder, f"white-{block:05d}-{part:05d}", ".npz", token)


def search_white_partition(job: WhiteLists, part: int) -> int:
    """Step 2 of the module docstring for partition ``part``: its cells' rows read and put
    in the space, every row of the store searched against them, a file per block of
    rows (written whole: a partition searched again writes the same files); with the
    cluster rule's cells, every ``parts``-th block's rows outside the sample also get
    their nearest cell, in a file per block. Returns the partition's rows."""
    from pairkit.core.side_files import write_arrays
    from pairkit.mine.ivf_parts import partial_search, partition_index, write_top
    from pairkit.mine.spectral import nearest_cells, outside_sample

    view = job.view()
    c0, c1 = job.lists.parts[part]
    index = partition_index(view, job.lists, np.arange(c0, c1))
    k = min(job.k, job.lists.n)
    for number, lo in enumerate(range(0, job.lists.n, QUERY_BLOCK)):
        hi = min(job.lists.n, lo + QUERY_BLOCK)
        s, i = partial_search(index, view[lo:hi], k)
        write_top(white_path(job.folder, number, part, job.token), s, i)
        deep = block_deep_rows(job, lo, hi)
        if len(deep):  # the big sources' rows, deeper, into a file of their own
            s, i = partial_search(index, view[deep], min(job.deep, job.lists.n))
            write_top(deep_path(job.folder, number, part, job.token), s, i)
        if job.cells is not None and number % job.parts == part:
            emb = job.cells.spectral
            nearest = nearest_cells(emb.reduced, outside_sample(emb, np.arange(lo, hi)),
                                    job.cells.centroids)
            write_arrays(cells_path(job.folder, number, job.token), {"nearest": nearest})
    return int(index.ntotal)


def split_white_lists(spec: Any, map_blocks: Any, remote: Any, workers: int, partitions: int
                      ) -> tuple[Any, dict[str, Any] | None]:
    """Steps 1 and 2 of the module docstring for the run ``spec``: the plan made by
    ``remote`` (a Ray task: its reference returned, never held here) or here, then each
    partition searched by ``map_blocks``. ``(plan, info)`` (``info``: ``parts``,
    ``blocks``, ``seconds``), or ``(None, None)`` when the search is not split (the
    plan searches the lists itself)."""
    import time

    t0 = time.perf_counter()
    if remote is not None:
        job, info = remote(plan_white, spec, workers, partitions)
    else:
        job, info = plan_white(spec, workers, partitions)
    if not info["parts"]:
        return None, None
    for _ in map_blocks(search_white_partition, job, list(range(info["parts"]))):
        pass
    return job, {**info, "seconds": round(time.perf_counter() - t0, 3)}


def remove_white(folder: str, token: str, info: dict[str, Any]) -> None:
    """Remove the candidate objects of :func:`split_white_lists` (``info``) beside the
    dataset at ``folder`` (best effort: any left over go with the writer's ``token``; a
    local run's go with its parts folder)."""
    from pairkit.core.side_files import remove_objects

    remove_objects([*(white_path(folder, b, p, token)
                      for b in range(info["blocks"]) for p in range(info["parts"])),
                    *(cells_path(folder, b, token) for b in range(info["blocks"])
                      if info.get("cells")),
                    *(deep_path(folder, b, p, token) for b in info.get("deep_blocks", [])
                      for p in range(info["parts"]))])


class SplitWhiteSearch:
    """Step 3 of the module docstring: ``search(space, k)`` of
    :func:`pairkit.mine.whitening.whitened_neighbours` answered from the partitions'
    files: every row's ``k`` nearest rows of other sources (``sources``), ``(ids,
    scores)``, as :func:`pairkit.mine.rules_run.search_neighbour_lists` gives them."""

    def __init__(self, job: WhiteLists, sources: np.ndarray) -> None:
        self.job, self.sources = job, sources

    def __call__(self, space: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        from pairkit.errors import PairkitError
        from pairkit.mine.clusters import other_sources
        from pairkit.mine.ivf_parts import merged_top

        job, n = self.job, self.job.lists.n
        kk, deep, deep_rows = list_depths(self.sources, k)
        same_rows = (deep_rows is None and job.deep_rows is None) or (
            deep_rows is not None and job.deep_rows is not None
            and np.array_equal(deep_rows, job.deep_rows))
        if space.shape != (n, job.space.dims) or kk > job.k or deep > job.deep \
                or not same_rows:
            raise PairkitError(  # a plan made for another search: never merged silently
                f"the whitened lists were searched for ({n}, {job.space.dims}) rows to "
                f"{job.k} (big sources' rows {job.deep}), not {tuple(space.shape)} to "
                f"{kk} ({deep})")
        ids = np.full((n, k), -1, dtype=np.int64)
        scores = np.full((n, k), -np.inf, dtype=np.float32)
        for number, lo in enumerate(range(0, n, QUERY_BLOCK)):
            hi = min(n, lo + QUERY_BLOCK)
            found_s, found_i = merged_top(
                [white_path(job.folder, number, p, job.token) for p in range(job.parts)],
                hi - lo, job.k, kk)
            ids[lo:hi], scores[lo:hi] = other_sources(found_s, found_i, self.sources, k,
                                                      query_sources=self.sources[lo:hi])
            rows = block_deep_rows(job, lo, hi)
            if len(rows):
                found_s, found_i = merged_top(
                    [deep_path(job.folder, number, p, job.token) for p in range(job.parts)],
                    len(rows), job.deep, deep)
                ids[rows], scores[rows] = other_sources(found_s, found_i, self.sources, k,
                                                        query_sources=self.sources[rows])
        return ids, scores


def spectral_of(job: WhiteLists, vectors: Any) -> Any:
    """The cluster rule's spectral embedding for the plan whose store rows are
    ``vectors`` (an array or a view): the one :func:`plan_white` made, its principal
    components computed from ``vectors`` when read (not from a copy of the store loaded
    for it), its cells for the plan's seed set from the workers' files (the nearest cell
    of every row outside the sample, as :func:`pairkit.mine.spectral.nearest_cells`
    gives them). None without :class:`CellsPlan`."""
    from pairkit.core.row_view import RowView, is_view
    from pairkit.core.side_files import read_arrays
    from pairkit.mine.spectral import outside_sample

    if job.cells is None:
        return None
    emb = job.cells.spectral
    fn, dim = emb.reduced.fn, emb.reduced.shape[1]
    reduced = vectors.mapped(fn, dim) if is_view(vectors) else RowView(vectors, fn=fn, dim=dim)
    reduced.recompute = True  # as pca_rows marks it: an IVF index of them keeps ids
    nearest = np.concatenate([np.zeros(0, np.int64)] + [
        read_arrays(cells_path(job.folder, b, job.token), ("nearest",))["nearest"]
        for b in range(job.blocks)])
    others = outside_sample(emb, np.arange(len(reduced)))
    if len(nearest) != len(others):
        from pairkit.errors import PairkitError

        raise PairkitError(f"the workers' nearest cells cover {len(nearest)} rows, not the "
                           f"{len(others)} outside the sample")
    return replace(emb, reduced=reduced, codes={},
                   cells={job.cells.seed: (job.cells.cell_of, nearest, others)})
