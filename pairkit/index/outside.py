"""Nearest neighbours *outside* the query's own part of a partition.

When a false-negative rule flags every candidate in the anchor's cluster, the
negatives are the anchor's nearest items in *other* clusters; on real data they
sit hundreds or thousands of ranks deep, so fetching them with an ordinary kNN
search means fetching (and discarding) everything in between. This search skips
the anchor's part instead: one index per part, each query searched against the
other parts' indices and the results merged (score descending, ties by id, as
:func:`pairkit.index.search.sort_results`). With exact indices the result equals
an exact search with the query's part filtered out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.coded_rows import (
    CodedRows,
    CodedRuns,
    Coords,
    coded_products,
    distinct_codes,
    table_products,
)

if TYPE_CHECKING:
    from pairkit.index.backend import SearchBackend
    from pairkit.index.options import IndexOptions


@dataclass
class OutsideSearcher:
    """``search(query_rows, k)``: for each query row of ``vectors`` (N, d), its ``k``
    nearest rows whose ``parts`` label differs from the query row's.

    ``make_searcher(sub_vectors) -> search(queries, k)`` builds one part's search
    (an exact or approximate index from :func:`pairkit.index.open.open_searcher`).
    ``max_parts``: search only this many other parts per query, the nearest by
    centroid similarity (None: all, which keeps an exact search exact).
    """

    vectors: np.ndarray
    parts: np.ndarray
    make_searcher: Any
    max_parts: int | None = None
    _rows: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _search: dict[int, Any] = field(default_factory=dict, repr=False)
    _centroids: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.parts = np.asarray(self.parts, dtype=np.int64)
        if len(self.parts) != len(self.vectors):
            raise ValueError(f"parts has {len(self.parts)} rows, vectors {len(self.vectors)}")
        self.labels = np.unique(self.parts)
        order = np.argsort(self.parts, kind="stable")
        bounds = np.searchsorted(self.parts[order], self.labels, side="left")
        ends = np.r_[bounds[1:], len(order)]
        self._rows = {int(p): order[s:e] for p, s, e in zip(self.labels, bounds, ends,
                                                             strict=True)}

    def _part_search(self, p: int) -> Any:
        if p not in self._search:
            rows = self._rows[p]
            self._search[p] = self.make_searcher(np.asarray(self.vectors[rows], np.float32))
        return self._search[p]

    def _nearest_parts(self, queries: np.ndarray, own: int) -> list[int]:
        others = [int(p) for p in self.labels if p != own]
        if self.max_parts is None or len(others) <= self.max_parts:
            return others
        if self._centroids is None:
            cents = np.stack([np.asarray(self.vectors[self._rows[int(p)]], np.float32).mean(0)
                              for p in self.labels])
            self._centroids = cents / np.maximum(np.linalg.norm(cents, axis=1, keepdims=True),
                                                 1e-12)
        sims = queries.mean(0) @ self._centroids.T
        ranked = [int(self.labels[i]) for i in np.argsort(-sims) if self.labels[i] != own]
        return ranked[: self.max_parts]

    def search(self, query_rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` (nq, k), best first, -inf / -1 padded where fewer exist."""
        from pairkit.index.search import sort_results

        query_rows = np.asarray(query_rows, dtype=np.int64)
        nq = len(query_rows)
        scores = np.full((nq, k), -np.inf, dtype=np.float32)
        ids = np.full((nq, k), -1, dtype=np.int64)
        if nq == 0 or k == 0:
            return scores, ids
        qparts = self.parts[query_rows]
        for own in np.unique(qparts):
            sel = np.flatnonzero(qparts == own)
            q = np.asarray(self.vectors[query_rows[sel]], dtype=np.float32)
            got_s, got_i = [], []
            for p in self._nearest_parts(q, int(own)):
                rows = self._rows[p]
                kk = min(k, len(rows))
                s, i = self._part_search(p)(q, kk)
                got_s.append(s)
                got_i.append(np.where(i >= 0, rows[np.maximum(i, 0)], -1))
            if not got_s:
                continue
            s, i = sort_results(np.concatenate(got_s, axis=1), np.concatenate(got_i, axis=1))
            width = min(k, s.shape[1])
            scores[sel, :width] = s[:, :width]
            ids[sel, :width] = i[:, :width]
        return scores, ids


def integer_rows(assign: Any) -> np.ndarray:
    """``assign`` as an integer array in its own dtype (the cluster rule keeps its runs in
    the smallest that holds them: no int64 copy of (runs, N) here), else int64."""
    assign = np.asarray(assign)
    return assign if assign.dtype.kind in "iu" else assign.astype(np.int64)


def masked_exact_search(vectors: np.ndarray, assign: np.ndarray, query_rows: np.ndarray,
                        k: int, *, votes: int = 1, big_group: int = 128,
                        block_bytes: int = 1 << 27, coords: Coords | None = None,
                        threshold: float = 1.0, skip: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Exact kNN of ``vectors[query_rows]`` among the rows that share fewer than
    ``votes`` of the query's clusters: row j is allowed for query q when
    ``assign[r, j] == assign[r, q]`` in fewer than ``votes`` runs r of ``assign`` (R, N)
    (``votes`` 1: in none), and, with ``coords`` (N, c) unit rows, when the cosine of
    their rows there is below ``threshold`` (the cluster rule's diffusion cosine); with
    ``skip`` (N,) codes (-1: none), not when ``skip[j] == skip[q] >= 0`` either (mine's
    big sources under the instance relation: every row of the anchor's own is excluded).

    Queries are grouped by their cluster signature (one allowed set per group). A group
    of at least ``big_group`` queries gets an exact FAISS index of its allowed rows
    (one copy, then BLAS search); smaller groups are scored against all rows with one
    matrix product, masked and cut (``big_group`` 128: 1.1-1.8x faster than 256, and
    faster than 64 or 32, on three real sets of 8,000 rows; same results). Results are
    ordered by score descending, ties by ascending id. Returns ``(scores, ids)`` (nq, k),
    -inf / -1 padded. Work: about one exact search (nq x N x d); memory O(N x d) for the
    largest allowed set.
    """
    from pairkit.core.unique import unique_rows
    from pairkit.index.search import knn_search

    x = np.asarray(vectors, dtype=np.float32)
    assign = integer_rows(assign)
    if assign.ndim == 1:
        assign = assign[None, :]
    query_rows = np.asarray(query_rows, dtype=np.int64)
    n = len(x)
    nq = len(query_rows)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    ids = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or k == 0 or n == 0:
        return scores, ids
    key = assign[:, query_rows].T
    if skip is not None:  # the query's skipped code is part of its allowed set
        skip = np.asarray(skip, dtype=np.int64)
        key = np.column_stack([key.astype(np.int64), skip[query_rows]])
    # np.unique(axis=0, return_inverse=True)'s signatures and groups, bit for bit
    sigs, _, group = unique_rows(key)
    if coords is not None:  # a mask per query, not per signature: every group is scored
        big_group = nq + 1  # by the blocks below
    small: list[np.ndarray] = []
    small_groups: list[np.ndarray] = []
    for g, sig in enumerate(sigs):
        members = np.flatnonzero(group == g)
        if len(members) < big_group:
            small.append(members)
            small_groups.append(np.full(len(members), g))
            continue
        cols = np.flatnonzero(_allowed(assign, sig, votes, skip))
        kk = min(k, len(cols))
        if kk == 0:
            continue
        s, i = knn_search(x[query_rows[members]], np.ascontiguousarray(x[cols]), kk)
        scores[members, :kk] = s
        ids[members, :kk] = np.where(i >= 0, cols[np.maximum(i, 0)], -1)
    if small:
        members = np.concatenate(small)
        member_group = np.concatenate(small_groups)
        step = max(1, block_bytes // max(1, 4 * n))
        for s0 in range(0, len(members), step):
            sel = members[s0 : s0 + step]
            # one allowed row set per signature (its queries share it), not one per query
            here, which = np.unique(member_group[s0 : s0 + step], return_inverse=True)
            table = np.stack([_allowed(assign, sigs[g], votes, skip) for g in here])
            allowed = table[np.asarray(which).ravel()]
            if coords is not None:
                allowed &= far_in(coords, query_rows[sel], threshold)
            top_s, top_i = _masked_top(x[query_rows[sel]] @ x.T, allowed, k)
            scores[sel] = top_s
            ids[sel] = top_i
    return scores, ids


def same_skip_code(query_codes: Any, row_codes: Any) -> Any:
    """(nq, n) bool block: row ``j`` has query ``i``'s skip code, which is one (>= 0; -1:
    none). numpy arrays or torch tensors alike (the IVF scan's and the torch search's
    masks)."""
    own = query_codes[:, None] == row_codes[None, :]
    own &= query_codes[:, None] >= 0  # in place: one bool block, not two
    return own


def _allowed(assign: np.ndarray, sig: np.ndarray, votes: int,
             skip: np.ndarray | None) -> np.ndarray:
    """(N,) bool: the rows a query of signature ``sig`` may get (:func:`masked_exact_search`:
    the runs' parts, then with ``skip`` the query's skipped code, ``sig``'s last value)."""
    if skip is None:
        return (assign == sig[:, None]).sum(axis=0) < votes  # type: ignore[no-any-return]
    runs = sig[:-1].astype(assign.dtype)
    allowed = (assign == runs[:, None]).sum(axis=0) < votes
    if sig[-1] >= 0:
        allowed &= skip != sig[-1]
    return allowed  # type: ignore[no-any-return]


def far_in(coords: Coords, rows: np.ndarray, threshold: float,
           cols: np.ndarray | None = None) -> np.ndarray:
    """(len(rows), N or len(cols)) bool: the cosine of row ``rows[i]`` and row j of the unit
    rows ``coords`` is below ``threshold`` (j over ``cols``, else every row). Coordinates
    stored by code (:class:`~pairkit.core.coded_rows.CodedRows`) are multiplied once per
    distinct pair of codes."""
    if isinstance(coords, CodedRows):
        every = np.arange(len(coords)) if cols is None else cols
        return coded_products(coords, np.asarray(rows), np.asarray(every)) < threshold
    left = np.asarray(coords[rows], dtype=np.float32)
    right = np.asarray(coords if cols is None else coords[cols], dtype=np.float32)
    return (left @ right.T) < threshold


def _masked_top(sims: np.ndarray, allowed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` of each row of ``sims`` (b, N) among ``allowed`` (b, N) columns: score
    descending, ties by ascending column; -inf / -1 padded.

    FAISS's heaps over the rows' values with implicit column ids (no (b, N) index array;
    on a block of 4,194 x 8,000 real scores 0.25 s against 0.48 s for a partition of the
    values and more for an argpartition), one extra place so that a tie at the k-th score
    is seen and settled by column over the whole row."""
    import faiss

    from pairkit.index.search import sort_results

    b, n = sims.shape
    np.copyto(sims, -np.inf, where=~allowed)  # never enters a heap (below its floor)
    kk = min(k, n)
    out_s = np.full((b, k), -np.inf, dtype=np.float32)
    out_i = np.full((b, k), -1, dtype=np.int64)
    if kk == 0 or b == 0:
        return out_s, out_i
    width = min(kk + 1, n)
    top_s = np.empty((b, width), dtype=np.float32)
    top_i = np.empty((b, width), dtype=np.int64)
    sims = np.ascontiguousarray(sims, dtype=np.float32)
    heaps = faiss.float_minheap_array_t()
    heaps.nh, heaps.k = b, width
    heaps.val, heaps.ids = faiss.swig_ptr(top_s), faiss.swig_ptr(top_i)
    heaps.heapify()
    heaps.addn(n, faiss.swig_ptr(sims), 0, 0, b)
    heaps.reorder()
    top_s[top_i < 0] = -np.inf  # unfilled places hold the heap's floor, not -inf
    top_s, top_i = sort_results(top_s, top_i)
    if width > kk:
        tied = (top_s[:, kk - 1] == top_s[:, kk]) & np.isfinite(top_s[:, kk])
        for r in np.flatnonzero(tied):
            order = np.lexsort((np.arange(n), -sims[r].astype(np.float64)))[:kk]
            top_s[r, :kk] = sims[r, order]
            top_i[r, :kk] = order
    out_s[:, :kk] = top_s[:, :kk]
    out_i[:, :kk] = np.where(np.isfinite(top_s[:, :kk]), top_i[:, :kk], -1)
    return out_s, out_i


class MaskedIvfSearch:
    """Approximate kNN that skips the rows sharing a cluster with the query, on an
    ``IndexIVFFlat`` or a :class:`~pairkit.index.half_ivf.HalfIvf` (the store's float16
    lists, converted as scanned) scanned list by list (BLAS, as :class:`IvfListMajor`).

    For a query, lists whose rows are all in its own cluster of the first run are not
    probed (they would give nothing; with ``votes`` 1 only); of the rest the ``nprobe``
    nearest by centroid are scanned, and inside them rows sharing a cluster with the
    query in at least ``votes`` runs are masked out, and with ``coords`` the rows whose
    cosine to the query there is at least ``threshold`` (:func:`far_in`). ``nprobe`` grows
    with ``k`` (a retry for a deeper list scans more cells), and a query whose probed
    cells hold fewer than ``k`` allowed rows is searched again with 4x the cells (the new
    ones only: each cell is scanned once per query) until it has ``k`` or every cell was
    scanned, so a short result means the store has no more (a caller reads it so).
    Returns the same ``(scores, ids)`` as an IVF search of the allowed rows with those
    probes.

    ``skip`` (N,) codes, -1 none (set by :meth:`AnchorSearch.skipping_sources`: mine's big
    sources): a query's rows of its own code are masked out too, and it probes the cells
    it would have probed fetching them (its k plus its code's rows, ``skip_sizes``): the
    same cells, the same result, without a heap of the source's size per query.
    """

    skip: np.ndarray | None = None
    skip_sizes: np.ndarray | None = None

    def __init__(self, index: Any, assign: np.ndarray, nprobe: int,
                 own_share: float = 1.0, votes: int = 1, coords: Coords | None = None,
                 threshold: float = 1.0) -> None:
        from pairkit.index.half_ivf import HalfIvf
        from pairkit.index.search import IvfListMajor

        # a HalfIvf (lists in the store's float16, converted as scanned: the same results)
        # is scanned as it is; an IndexIVFFlat through read-only views of its lists
        self.lists = index if isinstance(index, HalfIvf) else IvfListMajor(index)
        # runs stored by code (the cluster rule's above its spectral sample) stay so: a
        # row's labels are read from the small table through its code, never a (G, N) copy
        self.codes = assign.codes if isinstance(assign, CodedRuns) else None
        self.assign = integer_rows(assign.table if isinstance(assign, CodedRuns) else assign)
        if self.assign.ndim == 1:
            self.assign = self.assign[None, :]
        ivf = index if isinstance(index, HalfIvf) else self.lists.ivf
        self.nlist = int(ivf.nlist)
        self.nprobe = max(1, int(nprobe))
        self.votes = max(1, int(votes))
        self.coords = coords
        self.threshold = float(threshold)
        self.centroids = np.asarray(ivf.quantizer.reconstruct_n(0, self.nlist), np.float32)
        # each list's dominant cluster of the first run and its share of the list
        self.dominant = np.full(self.nlist, -1, dtype=np.int64)
        for lid in range(self.nlist):
            ids = self.lists.cell_ids(lid)  # not its rows (a HalfIvf would read them)
            if len(ids):
                values, counts = np.unique(self.runs_of(ids)[0], return_counts=True)
                if counts.max() >= own_share * len(ids):
                    self.dominant[lid] = values[np.argmax(counts)]

    def probes_for(self, depth: np.ndarray) -> np.ndarray:
        """Cells a search of ``depth`` rows probes (elementwise): ``nprobe`` per 32 rows
        of depth (a retry for a deeper list scans more cells), at most every cell."""
        return np.minimum(self.nlist, self.nprobe * np.maximum(1, -(-depth // 32)))

    def runs_of(self, rows: np.ndarray) -> np.ndarray:
        """(G, len(rows)): the labels of rows ``rows`` in every run."""
        return self.assign[:, rows if self.codes is None else self.codes[rows]]

    def blocked_by_code(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """(len(rows), len(cols)) bool: the rows' masks (votes, and the coordinates' cosine
        when they share the runs' codes) decided once per distinct pair of codes: the
        queries of a block and the rows of a cell share few of them."""
        assert self.codes is not None
        left, li = distinct_codes(self.codes, rows)
        right, ri = distinct_codes(self.codes, cols)
        shared = np.zeros((len(left), len(right)), dtype=np.int32)
        for r in range(self.assign.shape[0]):
            shared += self.assign[r, left][:, None] == self.assign[r, right][None, :]
        blocked = shared >= self.votes
        coords = self.coords
        if isinstance(coords, CodedRows) and coords.codes is self.codes:
            blocked |= ~(table_products(coords, left, right) < self.threshold)
            coords = None
        out = blocked[np.ix_(li, ri)]
        if coords is not None:  # coordinates of their own: row by row
            out |= ~far_in(coords, rows, self.threshold, cols)
        return out

    def search(self, query_rows: np.ndarray, k: int, queries: np.ndarray,
               block: int = 16_384, nprobe: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` (nq, k) for the query rows (their vectors ``queries``);
        ``nprobe``: cells per query (None: this search's, grown with ``k``).

        A query found short is searched again in its next cells only (those ranked from
        the cells it had to 4x as many): its first cells held fewer than ``k`` allowed
        rows, so its result already has every one of them, and the merge of the two
        (score, then id) is the search of all 4x cells at once, without scanning the
        first ones again."""
        from pairkit.index.search import sort_results

        query_rows = np.asarray(query_rows, dtype=np.int64)
        queries = np.asarray(queries)
        if nprobe is None and self.skip is not None and self.skip_sizes is not None:
            code = self.skip[query_rows]
            probes = self.probes_for(
                k + np.where(code >= 0, self.skip_sizes[np.maximum(code, 0)], 0))
            if len(np.unique(probes)) > 1:  # one search per depth
                scores = np.full((len(query_rows), k), -np.inf, dtype=np.float32)
                ids = np.full((len(query_rows), k), -1, dtype=np.int64)
                for value in np.unique(probes):
                    at = np.flatnonzero(probes == value)
                    scores[at], ids[at] = self.search(query_rows[at], k, queries[at], block,
                                                      int(value))
                return scores, ids
            nprobe = int(probes[0]) if len(probes) else 1
        if nprobe is None:
            nprobe = int(self.probes_for(np.asarray(k)))
        nprobe = min(self.nlist, nprobe)
        scores, ids, done = self._probe(query_rows, k, queries, block, nprobe)
        short = np.flatnonzero(ids[:, -1] < 0) if k else np.zeros(0, np.int64)
        done = done[short]  # the cells each short query scanned (-1: none)
        scanned = nprobe
        while len(short) and scanned < self.nlist:  # more cells for the short queries
            wider = min(self.nlist, 4 * scanned)
            more_s, more_i, more = self._probe(query_rows[short], k, queries[short], block,
                                               wider - scanned, done=done)
            got_s, got_i = sort_results(np.concatenate([scores[short], more_s], axis=1),
                                        np.concatenate([ids[short], more_i], axis=1))
            scores[short], ids[short] = got_s[:, :k], got_i[:, :k]
            still = ids[short, -1] < 0
            done = np.concatenate([done, more], axis=1)[still]
            short = short[still]
            scanned = wider
        return scores, ids

    def _probe(self, query_rows: np.ndarray, k: int, queries: np.ndarray, block: int,
               nprobe: int, done: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One pass: each query's ``nprobe`` nearest useful cells scanned, less the cells
        ``done`` (nq, c) it scanned before (-1 padded). Returns its ``(scores, ids)`` and
        the cells it scanned (nq, nprobe), -1 padded."""
        import faiss

        from pairkit.index.search import sort_results

        nq = len(query_rows)
        kk = min(nprobe, self.nlist)
        scores = np.full((nq, k), -np.inf, dtype=np.float32)
        ids = np.full((nq, k), -1, dtype=np.int64)
        cells = np.full((nq, kk), -1, dtype=np.int64)
        for s in range(0, nq, block):
            rows = query_rows[s : s + block]
            q = np.ascontiguousarray(queries[s : s + block], dtype=np.float32)
            coarse = q @ self.centroids.T
            q_assign = self.runs_of(rows)
            if self.votes == 1:
                useless = self.dominant[None, :] == q_assign[0][:, None]
                coarse[useless] = -np.inf
            if done is not None:  # scanned by an earlier pass: not again
                before = done[s : s + block]
                r, c = np.nonzero(before >= 0)
                coarse[r, before[r, c]] = -np.inf
            probes = np.argpartition(-coarse, kk - 1, axis=1)[:, :kk]
            ok = np.isfinite(np.take_along_axis(coarse, probes, 1))
            cells[s : s + len(rows)] = np.where(ok, probes, -1)
            flat = cells[s : s + len(rows)].ravel()
            qids = np.repeat(np.arange(len(rows)), kk)
            keep = flat >= 0
            flat, qids = flat[keep], qids[keep]
            order = np.argsort(flat, kind="stable")
            flat, qids = flat[order], qids[order]
            bounds = np.flatnonzero(np.diff(flat)) + 1
            heap = faiss.ResultHeap(len(rows), k, keep_max=True)
            for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(flat)], strict=True):
                if hi <= lo:
                    continue
                vec, lid_ids = self.lists.inverted_list(int(flat[lo]))
                if len(lid_ids) == 0:
                    continue
                sub = qids[lo:hi]
                sims = q[sub] @ vec.T
                if self.codes is not None:
                    blocked = self.blocked_by_code(rows[sub], lid_ids)
                else:
                    shared = np.zeros(sims.shape, dtype=np.int32)
                    for r in range(self.assign.shape[0]):
                        shared += q_assign[r, sub][:, None] == self.assign[r, lid_ids][None, :]
                    blocked = shared >= self.votes
                    if self.coords is not None:
                        blocked |= ~far_in(self.coords, rows[sub], self.threshold, lid_ids)
                if self.skip is not None:  # the query's own big source
                    blocked |= same_skip_code(self.skip[rows[sub]], self.skip[lid_ids])
                np.putmask(sims, blocked, -np.inf)
                heap.add_result_subset(sub, sims, lid_ids)
            heap.finalize()
            got_i = np.where(np.isfinite(heap.D) & (heap.I >= 0), heap.I, -1)
            got_s = np.where(got_i >= 0, heap.D, -np.inf).astype(np.float32)
            got_s, got_i = sort_results(got_s, got_i)
            scores[s : s + len(rows)] = got_s
            ids[s : s + len(rows)] = got_i
        return scores, ids, cells


@dataclass
class AnchorSearch:
    """``search(anchor_rows, k)`` of :func:`outside_searcher` (a class, so that it pickles:
    a Ray worker gets it with the blocks): ``how`` ``torch`` (``inner``: a torch flat
    index, masked), ``exact`` (:func:`masked_exact_search`), ``ivf`` (``inner``: a
    :class:`MaskedIvfSearch`) or ``full`` (``inner``: the plain index's search)."""

    how: str
    vectors: np.ndarray
    assign: np.ndarray
    votes: int
    inner: Any = None
    coords: Coords | None = None  # the exact and torch searches' second mask (far_in)
    threshold: float = 1.0
    # (N,) codes of the big sources the exact and torch searches skip too (each anchor its
    # own; -1: none): :meth:`skipping_sources`
    skip: np.ndarray | None = None

    def skipping_sources(self, codes: np.ndarray) -> AnchorSearch | None:
        """This search, also skipping the rows of the anchor's own ``codes`` (N,) (mine's
        big sources under the instance relation, whose rows are all excluded: an anchor of
        a source of 10,000 views then fetches no room for them); None where it can't (the
        plain index's search, ``full``). The IVF search probes as many cells as fetching
        the source's rows would have (:class:`MaskedIvfSearch`)."""
        from dataclasses import replace

        skip = np.asarray(codes, dtype=np.int64)
        if self.how in ("exact", "torch"):
            return replace(self, skip=skip)
        if self.how == "ivf":
            import copy

            inner = copy.copy(self.inner)
            inner.skip = skip
            inner.skip_sizes = np.bincount(skip[skip >= 0])
            return replace(self, inner=inner)
        return None

    def __call__(self, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.how == "torch":
            return self.inner.search_masked(  # type: ignore[no-any-return]
                self.vectors[rows], k, self.assign[:, rows], self.assign, votes=self.votes,
                query_coords=None if self.coords is None else self.coords[rows],
                base_coords=self.coords, threshold=self.threshold,
                query_skip=None if self.skip is None else self.skip[rows],
                base_skip=self.skip)
        if self.how == "exact":
            return masked_exact_search(self.vectors, self.assign, rows, k, votes=self.votes,
                                       coords=self.coords, threshold=self.threshold,
                                       skip=self.skip)
        if self.how == "ivf":
            return self.inner.search(rows, k, self.vectors[rows])  # type: ignore[no-any-return]
        return self.inner(self.vectors[rows], k)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class PartIndex:
    """One cluster's search for :class:`OutsideSearcher`: the run's index ``kind`` (exact
    for a part of at most 4,096 rows), built by the one entry point."""

    index: IndexOptions
    kind: str
    engine: SearchBackend

    def __call__(self, sub: np.ndarray) -> Any:
        from dataclasses import replace

        from pairkit.index.open import open_searcher

        sub_kind = self.kind if self.kind == "flat" or len(sub) > 4096 else "flat"
        return open_searcher(sub, replace(self.index, kind=sub_kind, nlist=None),
                             engine=self.engine).search


def outside_searcher(vectors: np.ndarray, assign: np.ndarray, index: IndexOptions,
                     engine: SearchBackend, store_root: Any = None,
                     content_id: str | None = None, votes: int = 1,
                     what: str = "cluster", rows: Any = None, coords: Coords | None = None,
                     threshold: float = 1.0) -> tuple[Any, str]:
    """An anchor searcher that skips the rows sharing the anchor's cluster in at least
    ``votes`` runs of ``assign`` (runs, N), and with ``coords`` the rows at a cosine of at
    least ``threshold`` to the anchor there (exact, torch and IVF; the others leave those
    to the rule's flags after the search). Exact (``flat``, and ``auto`` on a small
    store): those rows are masked out of one exact search. IVF: the store's IVF index
    (built, or loaded when saved) scanned list by list with the same mask; built from
    ``rows`` when given (the store's rows read in place,
    :class:`pairkit.core.shard_rows.ShardRows`: lists long enough for the list-major scan
    keep the store's float16, a :class:`pairkit.index.half_ivf.HalfIvf`, half the memory
    of a float32 ``IndexIVFFlat`` beside ``vectors``; the same results). Other kinds,
    one vote: one index per cluster of the first run, the anchor's own not searched
    (other runs' clusters are flagged after); more votes: the plain index (the rule flags
    after). Returns ``(search(anchor_rows, k), description)``."""
    from dataclasses import replace

    from pairkit.index.open import open_searcher
    from pairkit.index.options import IndexOptions

    which = "any" if votes == 1 else f"at least {votes}"
    near = ("" if coords is None
            else f" or at a diffusion cosine >= {round(threshold, 3):g} to it")
    skipped = (f"rows sharing a cluster with the anchor in {which} of {len(assign)} k-means "
               f"runs{near} not searched (cluster rule)" if what == "cluster" else
               "rows of the anchor's label not searched (label rule)")
    if what == "cluster" and coords is not None and votes > len(assign):  # the threshold alone
        skipped = (f"rows at a diffusion cosine >= {round(threshold, 3):g} to the anchor not "
                   "searched (cluster rule)")
    if engine.name == "torch":
        tindex = open_searcher(vectors, IndexOptions(kind="flat"), engine=engine).index
        return AnchorSearch("torch", vectors, assign, votes, tindex, coords=coords,
                            threshold=threshold), f"exact, {engine.describe()}; {skipped}"
    kind = index.cpu_kind(len(vectors))
    if kind == "flat" and not index.float16:
        return AnchorSearch("exact", vectors, assign, votes, coords=coords,
                            threshold=threshold), f"flat (exact), {skipped}"
    if kind == "ivf" and not index.float16:
        from pairkit.index.backend import CPU
        from pairkit.index.half_ivf import HalfIvf
        from pairkit.index.search import IvfListMajor

        opened = open_searcher(vectors if rows is None else rows, replace(index, kind=kind),
                               store_root=store_root, content_id=content_id, engine=CPU)
        if isinstance(opened.index, HalfIvf) or IvfListMajor.supports(opened.index):
            masked = MaskedIvfSearch(opened.index, assign, opened.options.nprobe or 1,
                                     votes=votes, coords=coords, threshold=threshold)
            text = f"{opened.describe()}; cells and {skipped}"
            return AnchorSearch("ivf", vectors, assign, votes, masked), text
    if votes > 1:  # the per-cluster indices skip one run's cluster: too much here
        full = open_searcher(vectors, index, store_root=store_root, content_id=content_id,
                             engine=engine)
        return AnchorSearch("full", vectors, assign, votes, full.search), full.describe()
    outside = OutsideSearcher(vectors, assign[0], PartIndex(index, kind, engine))
    n_parts = len(outside.labels)
    text = (f"{kind} per cluster ({n_parts} clusters), built now; the anchor's own cluster "
            "is not searched (cluster rule)")
    return outside.search, text


# a part whose queries in one call are fewer than this, and whose rows are at most
# OVER_FETCH_ROWS, is searched in the whole base with k + its size (one search for all
# such parts) instead of in a copy of the rows outside it: a copy per part costs O(N x d)
# whatever the number of its queries
SMALL_PART_QUERIES = 128
OVER_FETCH_ROWS = 1024


def search_outside_parts(base: np.ndarray, parts: np.ndarray, queries: np.ndarray,
                         own: np.ndarray, k: int, whole: Any
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Exact kNN of ``queries`` (nq, d) among the rows of ``base`` (N, d) float32 whose
    ``parts`` (N,) differs from the query's ``own`` (nq,): the same ``(scores, ids)`` as an
    exact search of every row with the query's part filtered out (score descending, ties
    by ascending id), -inf / -1 padded where fewer rows are left. ``whole(queries, k)``:
    the exact search of every row of ``base``.

    A part with many queries here, or many rows, is searched in a copy of the rows outside
    it (:func:`pairkit.index.search.knn_search`: BLAS over N - part rows); the others in one
    search of ``whole`` with k + the largest such part, the part's rows dropped after.
    Work: one exact search; memory: one copy of ``base`` less a part, and nq x k results
    (x (k + 1,024) for the small parts), never nq x part size for a big part.
    """
    from pairkit.index.search import knn_search

    parts = np.asarray(parts, dtype=np.int64)
    own = np.asarray(own, dtype=np.int64)
    nq = len(queries)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    ids = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or k == 0 or len(base) == 0:
        return scores, ids
    values, inverse, counts = np.unique(own, return_inverse=True, return_counts=True)
    inverse = np.asarray(inverse).ravel()
    sizes = dict(zip(*np.unique(parts, return_counts=True), strict=True))
    small: list[np.ndarray] = []
    for g, p in enumerate(values):
        sel = np.flatnonzero(inverse == g)
        size = int(sizes.get(p, 0))
        if counts[g] < SMALL_PART_QUERIES and size <= OVER_FETCH_ROWS:
            small.append(sel)
            continue
        cols = np.flatnonzero(parts != p)
        kk = min(k, len(cols))
        if kk == 0:
            continue
        s, i = knn_search(queries[sel], np.ascontiguousarray(base[cols]), kk)
        scores[sel, :kk] = s
        ids[sel, :kk] = np.where(i >= 0, cols[np.maximum(i, 0)], -1)
    if small:
        sel = np.concatenate(small)
        scores[sel], ids[sel] = over_fetched_outside(parts, queries[sel], own[sel], k, whole)
    return scores, ids


def over_fetched_outside(parts: np.ndarray, queries: np.ndarray, own: np.ndarray, k: int,
                         whole: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`search_outside_parts` by one search of every row (``whole(queries, k)``)
    with k + the largest of the queries' parts, that part's rows dropped after: exact,
    at the cost of fetching the parts (for small ones)."""
    from pairkit.index.search import kept_first

    parts = np.asarray(parts, dtype=np.int64)
    own = np.asarray(own, dtype=np.int64)
    scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    ids = np.full((len(queries), k), -1, dtype=np.int64)
    if len(queries) == 0 or k == 0:
        return scores, ids
    values, counts = np.unique(parts, return_counts=True)
    biggest = int(counts[np.isin(values, own)].max(initial=0))
    s, i = whole(queries, min(len(parts), k + biggest))
    keep = (i >= 0) & (parts[np.maximum(i, 0)] != own[:, None])
    s, i = kept_first(s, i, keep, k)  # the kept ones, in order
    scores[:, :s.shape[1]], ids[:, :i.shape[1]] = s, i
    return scores, ids
