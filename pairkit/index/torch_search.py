"""Exact inner-product search in torch, on CUDA or CPU (the device is a parameter).

For GPUs without a usable faiss-gpu (faiss-cpu installs, CUDA-13-only machines) and on
request (``--backend torch``). The results equal FAISS flat (``IndexFlatIP``) up to
float rounding, ties by ascending id like :func:`pairkit.index.search.sort_results`;
there is no limit on k.

How a block of queries is searched (memory: the base once on the device, plus one
``query_block x base_block`` score block; never N x N):

1. **Low-precision GEMM** over column blocks of the base (float16, bfloat16 or float32).
2. **Streaming top-k'** (k' = k + a margin): in each column block a chunked
   pre-selection (the k' chunks of ``chunk`` columns with the highest maximum hold every
   element of the block's top k') cuts the selection work to a fraction of the block,
   and a running (nq, k') candidate set is merged block by block.
3. **fp32 re-scoring** of the k' candidates and a sort by (score desc, id asc).
4. **Certificate**: a low-precision score differs from the exact one by at most
   ``eps`` (a rounding bound, :func:`error_bound`), and every row left out of the
   candidates scores at most the k'-th kept low-precision score ``v``. When the k-th
   exact score exceeds ``v + eps`` nothing outside the candidates can reach the top k
   or tie with it, so the row is exact. Rows that fail (dense ties, duplicates) are
   searched again with a 4x larger k', up to k' = N (then every row is re-scored).

Ranges (``range_blocks``) use the same GEMM with the threshold lowered by ``eps`` and
re-check each candidate pair in fp32, so no pair >= threshold is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pairkit.core.devices import host_tensor
from pairkit.errors import PairkitError
from pairkit.index.outside import same_skip_code

DTYPES = ("float16", "bfloat16", "float32")
# unit roundoff (half an ulp at 1) of each compute dtype
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}
# products whose size could overflow float16 fall back to float32 compute
_FP16_SAFE_PRODUCT = 1.0e4


def default_blocks(device: str) -> tuple[int, int]:
    """``(query_block, base_block)``: the score block holds 16,384 x 65,536 scores
    (2 GB in float16) on CUDA, 1,024 x 16,384 (64 MB in float32) on CPU."""
    return (16384, 65536) if str(device).startswith("cuda") else (1024, 16384)


def error_bound(dim: int, dtype: str, inputs_exact: bool) -> float:
    """Bound on |low-precision score - exact score| for unit-norm rows, as a multiple of
    ``|q| |b|``: input rounding (2u, none when the rows are already representable), output
    rounding (u) and fp32 accumulation in the GEMM and in the re-scoring (2 d u32), with 2%
    slack. u is the unit roundoff of ``dtype`` (2^-11 for float16, 2^-8 for bfloat16)."""
    u = UNIT_ROUNDOFF[dtype]
    u32 = UNIT_ROUNDOFF["float32"]
    inputs = 0.0 if inputs_exact else 2 * u + u * u
    return 1.02 * (inputs + u * (1 + u) ** 2 + 2 * dim * u32) + 1e-7


def _torch_dtype(name: str) -> Any:
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16,
            "float32": torch.float32}[name]


class TorchFlatIndex:
    """Exact inner-product search over ``base`` (N, d) in torch on ``device``.

    ``dtype``: the GEMM precision (``float16`` default on CUDA, ``float32`` on CPU);
    results are always re-scored in float32. ``query_block`` x ``base_block`` bounds the
    score block; ``chunk`` (0 = off) is the column chunk of the pre-selection; ``margin``
    is how many candidates beyond k are kept (k' = k + max(margin, k // 4)).
    Exposes ``ntotal``, ``d`` and ``search(x, k)`` like a FAISS index.
    """

    # search() already orders ties by id and has no k limit (knn_search calls it as is)
    exact_ties = True

    def __init__(self, base: np.ndarray, *, device: str = "cpu", dtype: str | None = None,
                 query_block: int | None = None, base_block: int | None = None,
                 chunk: int = 64, margin: int = 16) -> None:
        import torch

        if base.ndim != 2:
            raise PairkitError(f"the base must be 2-d (N, d), got shape {base.shape}")
        self.device = torch.device(device)
        cuda = self.device.type == "cuda"
        dtype = dtype or ("float16" if cuda else "float32")
        if dtype not in DTYPES:
            raise PairkitError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype}")
        qb, bb = default_blocks(str(device))
        self.query_block = int(query_block or qb)
        self.base_block = int(base_block or bb)
        if self.query_block < 1 or self.base_block < 1:
            raise PairkitError("query_block and base_block must be >= 1")
        self.chunk = int(chunk)
        self.margin = int(margin)
        self.ntotal, self.d = int(base.shape[0]), int(base.shape[1])
        host = host_tensor(np.ascontiguousarray(base))
        if host.dtype not in (torch.float16, torch.float32, torch.bfloat16):
            host = host.float()
        exact = host.to(self.device, non_blocking=False)
        norms = exact.float().norm(dim=1) if self.ntotal else torch.zeros(0)
        self.max_norm = float(norms.max()) if self.ntotal else 0.0
        if dtype == "float16" and self.max_norm**2 > _FP16_SAFE_PRODUCT:
            dtype = "float32"  # scores could overflow float16
        self.dtype = dtype
        tdt = _torch_dtype(dtype)
        low = exact.to(tdt)
        # float32 rows for re-scoring; a float16 store cast to float16 is already exact
        self.base_exact_input = bool(torch.equal(low.float(), exact.float()))
        self.base_low = low.contiguous()
        self.base32 = self.base_low if self.base_exact_input else exact.float().contiguous()
        del exact
        # rows searched, and rows searched again with a larger k' (ties, dense scores)
        self.counts = {"rows": 0, "rows_searched_again": 0}

    # -- kNN -------------------------------------------------------------------------
    def kprime(self, k: int) -> int:
        """Candidates kept per query for a search of ``k``."""
        return min(self.ntotal, k + max(self.margin, k // 4))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` (nq, k): float32 exact inner products, best first, ties by
        ascending id; padded with -inf / -1 where k > N."""

        nq = len(queries)
        scores = np.full((nq, k), -np.inf, dtype=np.float32)
        ids = np.full((nq, k), -1, dtype=np.int64)
        kk = min(k, self.ntotal)
        if nq == 0 or kk == 0:
            return scores, ids
        for start in range(0, nq, self.query_block):
            block = np.asarray(queries[start : start + self.query_block])
            q = host_tensor(np.ascontiguousarray(block, dtype=np.float32)).to(self.device)
            s, i = self._search_rows(q, kk)
            scores[start : start + len(block), :kk] = s.cpu().numpy()
            ids[start : start + len(block), :kk] = i.cpu().numpy()
        return scores, ids

    def search_masked(self, queries: np.ndarray, k: int, query_assign: np.ndarray | None,
                      base_assign: Any, votes: int = 1, *,
                      query_coords: np.ndarray | None = None,
                      base_coords: Any = None,  # an array or CodedRows
                      threshold: float = 1.0, query_skip: np.ndarray | None = None,
                      base_skip: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`search`, among the base rows that share fewer than ``votes``
        labels with the query: row j is allowed for query q when ``base_assign[r, j] ==
        query_assign[r, q]`` for fewer than ``votes`` r (``query_assign`` (R, nq),
        ``base_assign`` (R, N): cluster ids of R runs; both None: no such mask), and,
        with ``base_coords`` (N, c) and ``query_coords`` (nq, c) unit rows, when their
        cosine there is below ``threshold`` (the cluster rule's diffusion cosine), and,
        with ``base_skip`` (N,) and ``query_skip`` (nq,) codes (-1: none), unless
        ``base_skip[j] == query_skip[q] >= 0`` (mine's big sources, or the parts of
        ``Searcher.search_outside``: skipped rather than fetched and dropped). Padded with
        -inf / -1 where fewer rows are allowed. The base's one-hot codes (coordinates,
        skip codes) are kept on the device between calls with the same arrays."""

        nq = len(queries)
        scores = np.full((nq, k), -np.inf, dtype=np.float32)
        ids = np.full((nq, k), -1, dtype=np.int64)
        kk = min(k, self.ntotal)
        if nq == 0 or kk == 0:
            return scores, ids
        labelled = base_assign is not None and query_assign is not None
        if labelled:
            # "shares a label in some run" as a product of one-hot codes: one narrow GEMM
            # per score block (R x L columns) instead of R comparison passes over it
            given = base_assign  # the caller's object (an array, or runs stored by code)
            base_assign = np.asarray(base_assign)  # its own integer dtype: the same object
            if base_assign.dtype.kind not in "iu":  # for the cache below
                base_assign = base_assign.astype(np.int64)
            if base_assign.ndim == 1:
                base_assign = base_assign[None, :]
                query_assign = np.asarray(query_assign)[None, :]
            width = int(max(base_assign.max(), np.asarray(query_assign).max())) + 1
            # the same array object (held here, so its id can't be reused) and width
            cached = getattr(self, "_base_key", None)
            if cached is None or cached[0] is not given or cached[1] != width:
                self._base_assign = self._onehot(base_assign, width)
                self._base_key = (given, width)
        self._votes = max(1, int(votes))
        self._threshold = float(threshold)
        near = base_coords is not None and query_coords is not None
        if near and getattr(self, "_coords_key", None) is not base_coords:
            self._base_coords = host_tensor(
                np.ascontiguousarray(base_coords, dtype=np.float32)).to(self.device)
            self._coords_key = base_coords  # the same array object (held here)
        skipping = base_skip is not None and query_skip is not None
        if skipping and getattr(self, "_skip_key", None) is not base_skip:
            self._base_skip = self._codes(base_skip)
            self._skip_key = base_skip  # the same array object (held here)
        for start in range(0, nq, self.query_block):
            block = np.asarray(queries[start : start + self.query_block])
            q = host_tensor(np.ascontiguousarray(block, dtype=np.float32)).to(
                self.device)
            qa = None if not labelled else self._onehot(
                np.asarray(query_assign)[:, start : start + len(block)], width)
            qc = None if not near else host_tensor(np.ascontiguousarray(
                query_coords[start : start + len(block)], dtype=np.float32)).to(self.device)
            qs = None if not skipping else self._codes(
                np.asarray(query_skip)[start : start + len(block)])
            s, i = self._search_rows(q, kk, qa, qc, qs)
            s, i = s.cpu().numpy(), i.cpu().numpy()
            i = np.where(np.isfinite(s), i, -1)
            scores[start : start + len(block), :kk] = s
            ids[start : start + len(block), :kk] = i
        return scores, ids

    def _codes(self, codes: np.ndarray) -> Any:
        """int64 ``codes`` (n,) on the device."""
        import torch

        return torch.from_numpy(np.ascontiguousarray(codes, dtype=np.int64)).to(self.device)

    def _onehot(self, assign: np.ndarray, width: int) -> Any:
        """(n, R x width) one-hot codes of the labels ``assign`` (R, n), in the GEMM's
        dtype (0/1 values and small integer sums are exact in float16 and bfloat16)."""
        import torch

        r, n = assign.shape
        cols = torch.from_numpy((np.arange(r)[:, None] * width
                                 + assign.astype(np.int64)).T.copy()).to(
            self.device)
        code = torch.zeros((n, r * width), dtype=self.base_low.dtype, device=self.device)
        code.scatter_(1, cols, 1.0)
        return code

    def _search_rows(self, q32: Any, k: int, qa: Any = None, qc: Any = None,
                     qs: Any = None) -> tuple[Any, Any]:
        """Exact top-k of a block of float32 queries (on the device): (scores, ids).
        ``qa`` (n, R x L): the queries' one-hot labels for :meth:`search_masked` (None:
        no mask); ``qc`` (n, c): their coordinates for its second mask (None: none);
        ``qs`` (n,): their skip codes for its third (None: none)."""
        import torch

        n = len(q32)
        out_s = torch.empty((n, k), dtype=torch.float32, device=self.device)
        out_i = torch.empty((n, k), dtype=torch.int64, device=self.device)
        rows = torch.arange(n, device=self.device)
        kp = self.kprime(k)
        self.counts["rows"] += n
        while len(rows):
            # rows x k' entries per pass at most as many as one score block holds
            step = max(1, min(len(rows), self.query_block * self.base_block // max(kp, 1)))
            undecided = []
            for c0 in range(0, len(rows), step):
                sub = rows[c0 : c0 + step]
                s, i, ok = self._candidates(q32[sub], k, kp, None if qa is None else qa[sub],
                                            None if qc is None else qc[sub],
                                            None if qs is None else qs[sub])
                out_s[sub[ok]], out_i[sub[ok]] = s[ok], i[ok]
                undecided.append(sub[~ok])
            rows = torch.cat(undecided)
            self.counts["rows_searched_again"] += len(rows)
            kp = min(self.ntotal, kp * 4)
        return out_s, out_i

    def _candidates(self, q32: Any, k: int, kp: int, qa: Any = None, qc: Any = None,
                    qs: Any = None) -> tuple[Any, Any, Any]:
        """Top-k of each query from a k'-candidate pass: (scores, ids, certified).
        With ``qa``, base rows sharing a label with the query score -inf; with ``qc``, so
        do those at a coordinate cosine >= the threshold; with ``qs``, those of the
        query's skip code (>= 0)."""
        import torch

        q_low = q32.to(self.base_low.dtype)
        q_exact = (q_low.float() == q32).all(dim=1)
        run_s = run_i = None
        with _full_precision_reductions():
            for c0 in range(0, self.ntotal, self.base_block):
                block = self.base_low[c0 : c0 + self.base_block]
                scores = q_low @ block.T
                if qa is not None:  # runs in which query and row share a label
                    shared = qa @ self._base_assign[c0 : c0 + len(block)].T
                    scores.masked_fill_(shared > self._votes - 0.5, float("-inf"))
                if qc is not None:  # the rows at a diffusion cosine >= the threshold
                    cos = qc @ self._base_coords[c0 : c0 + len(block)].T
                    scores.masked_fill_(cos >= self._threshold, float("-inf"))
                if qs is not None:  # the rows of the query's skip code (its big source)
                    own = same_skip_code(qs, self._base_skip[c0 : c0 + len(block)])
                    scores.masked_fill_(own, float("-inf"))
                s, i = block_topk(scores, min(kp, len(block)), self.chunk)
                i = i + c0
                if run_s is None:
                    run_s, run_i = s, i
                else:
                    s = torch.cat([run_s, s], dim=1)
                    i = torch.cat([run_i, i], dim=1)
                    if s.shape[1] > kp:
                        s, pos = s.topk(kp, dim=1, sorted=False)
                        i = i.gather(1, pos)
                    run_s, run_i = s, i
        assert run_s is not None and run_i is not None
        exact = rescore(q32, self.base32, run_i)
        if qa is not None or qc is not None or qs is not None:  # masked rows stay out
            exact = exact.masked_fill(torch.isinf(run_s) & (run_s < 0), float("-inf"))
        s, i = sort_by_score_then_id(exact, run_i)
        if kp >= self.ntotal:
            return s[:, :k], i[:, :k], torch.ones(len(q32), dtype=torch.bool,
                                                  device=self.device)
        floor = run_s.float().min(dim=1).values  # every non-candidate scores <= floor
        qn = q32.norm(dim=1)
        unit = torch.where(
            q_exact & self.base_exact_input,
            error_bound(self.d, self.dtype, True), error_bound(self.d, self.dtype, False))
        eps = unit * qn * self.max_norm
        certified = s[:, k - 1] > floor + eps
        return s[:, :k], i[:, :k], certified

    # -- ranges ----------------------------------------------------------------------
    def range_blocks(self, queries: np.ndarray, threshold: float, batch_size: int | None = None,
                     progress: Callable[[int], None] | None = None,
                     ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Yield ``(query_ids, base_ids, scores)`` of every pair with float32 score >=
        ``threshold``, one block of queries at a time (sorted by query id, then base id).
        Memory: one score block plus the block's pairs. ``progress(m)`` after each block
        (``m``: its queries)."""
        import torch

        t32 = np.float32(threshold)
        eps_unit = error_bound(self.d, self.dtype, False)
        bs = int(batch_size or self.query_block)
        for start in range(0, len(queries), bs):
            block = np.ascontiguousarray(queries[start : start + bs], dtype=np.float32)
            q32 = host_tensor(block).to(self.device)
            q_low = q32.to(self.base_low.dtype)
            lowered = float(t32) - eps_unit * q32.norm(dim=1) * self.max_norm
            # compared in the GEMM's dtype: lower by two more roundoffs so the cast can't
            # raise the threshold above the bound
            u = UNIT_ROUNDOFF[self.dtype]
            lowered = (lowered - 2 * u * lowered.abs() - 1e-6).to(q_low.dtype)[:, None]
            rows_l, ids_l, sc_l = [], [], []
            with _full_precision_reductions():
                for c0 in range(0, self.ntotal, self.base_block):
                    scores = q_low @ self.base_low[c0 : c0 + self.base_block].T
                    r, c = torch.nonzero(scores >= lowered, as_tuple=True)
                    if len(r) == 0:
                        continue
                    c = c + c0
                    exact = (q32[r] * self.base32[c].float()).sum(dim=1)
                    keep = exact >= float(t32)
                    rows_l.append(r[keep])
                    ids_l.append(c[keep])
                    sc_l.append(exact[keep])
            if rows_l:
                r = torch.cat(rows_l)
                c = torch.cat(ids_l)
                s = torch.cat(sc_l)
                order = torch.argsort(r * self.ntotal + c)
                r, c, s = r[order], c[order], s[order]
                yield (r.cpu().numpy().astype(np.int64) + start, c.cpu().numpy().astype(np.int64),
                       s.cpu().numpy().astype(np.float32))
            else:
                yield (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
            if progress is not None:
                progress(len(block))


def block_topk(scores: Any, kp: int, chunk: int) -> tuple[Any, Any]:
    """Top ``kp`` (unsorted) of each row of a score block: (values, column ids).

    Pre-selection: the ``kp`` chunks of ``c`` columns with the highest maximum hold every
    element of the top ``kp`` (each of those elements is >= the kp-th largest chunk
    maximum), so only ``kp * c`` columns are selected from. ``c`` is ``chunk``, halved
    until the block has at least 4 kp chunks (large k); no pre-selection below c = 4."""
    n_rows, n_cols = scores.shape
    c = chunk
    while c >= 4 and n_cols // c < 4 * kp:
        c //= 2
    if c >= 4 and n_cols % c == 0:
        import torch

        per = scores.view(n_rows, n_cols // c, c)
        best = per.amax(dim=2).topk(kp, dim=1, sorted=False).indices  # (rows, kp)
        cols = (best.unsqueeze(2) * c
                + torch.arange(c, device=scores.device)).view(n_rows, kp * c)
        vals, pos = scores.gather(1, cols).topk(kp, dim=1, sorted=False)
        return vals, cols.gather(1, pos)
    vals, pos = scores.topk(kp, dim=1, sorted=False)
    return vals, pos


def rescore(q32: Any, base: Any, ids: Any) -> Any:
    """float32 inner products of each query with its candidate rows: (nq, k') from
    ``q32`` (nq, d), ``base`` (N, d) and ``ids`` (nq, k')."""
    import torch

    out = torch.empty(ids.shape, dtype=torch.float32, device=q32.device)
    # bounded gathers: about 2^22 candidate rows at a time; an elementwise product and a
    # sum, not bmm, so that no TF32 matmul setting can change the float32 scores
    step = max(1, (1 << 22) // max(ids.shape[1], 1))
    for s0 in range(0, len(ids), step):
        vec = base[ids[s0 : s0 + step]].float()  # (b, k', d)
        out[s0 : s0 + step] = (vec * q32[s0 : s0 + step].unsqueeze(1)).sum(dim=2)
    return out


def sort_by_score_then_id(scores: Any, ids: Any) -> tuple[Any, Any]:
    """Rows ordered by score descending, ties by ascending id (two stable sorts)."""
    import torch

    ids_sorted, order = torch.sort(ids, dim=1, stable=True)
    scores = scores.gather(1, order)
    scores, order = torch.sort(scores, dim=1, descending=True, stable=True)
    return scores, ids_sorted.gather(1, order)


class _full_precision_reductions:
    """cuBLAS may reduce fp16/bf16 GEMMs in reduced precision (split-K) and run float32
    GEMMs in TF32; the error bound assumes float32 products and accumulation, so both are
    switched off inside the block (and restored after it)."""

    _FLAGS = ("allow_fp16_reduced_precision_reduction",
              "allow_bf16_reduced_precision_reduction", "allow_tf32")

    def __enter__(self) -> None:
        import torch

        m = torch.backends.cuda.matmul
        self.saved = {f: getattr(m, f) for f in self._FLAGS}
        for f in self._FLAGS:
            setattr(m, f, False)

    def __exit__(self, *exc: object) -> None:
        import torch

        m = torch.backends.cuda.matmul
        for f, v in self.saved.items():
            setattr(m, f, v)


def torch_knn(queries: np.ndarray, base: np.ndarray, k: int, *, device: str = "cpu",
              dtype: str | None = None, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """One-shot exact search: ``TorchFlatIndex(base, ...).search(queries, k)``."""
    return TorchFlatIndex(base, device=device, dtype=dtype, **kwargs).search(queries, k)
