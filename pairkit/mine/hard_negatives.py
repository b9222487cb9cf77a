"""Hard- and easy-negative selection over a store.

For each anchor (an item with at least one positive under the relation):

1. Positives: the anchor's positive set (:meth:`Relation.positive_sets`); the
   row's positive is the weakest one (lowest score, ties by id) or one drawn
   at random with the seed; the margin reference is always the weakest.
2. Candidates (``--hard``): the anchor's nearest neighbours, best first, from
   the search function. The anchor, its positives and the other views of its
   source are excluded; then optional false-negative flags (a filter hook),
   then ``--max-score``/``--min-score`` and the margins. What is left are the
   *valid* candidates, ranked 0, 1, 2, ... by score.
3. Window and sampling: valid ranks ``[range_min, range_max)``; ``top`` takes the
   first K, ``random`` K uniformly, ``softmax`` K without replacement with
   probability proportional to ``exp(score / T)`` (Gumbel-top-k).
4. Headroom: candidates are fetched with enough spare (the largest exclusion
   set plus the window); anchors that still come up short are searched again
   with 4x the k until they have the window or the store is exhausted.
   Anchors that end with fewer than K negatives are kept and counted.

Without ``--hard`` (easy negatives) candidates are drawn uniformly from the
store and filtered by the same rules, so the K negatives are a uniform sample
of the valid non-positives.

Randomness comes from a counter-based hash of ``(seed, anchor, item)``, so the
output depends only on the seed, not on batch sizes, retries or threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pairkit.core.pairs import MinedPairs
from pairkit.core.relations import Relation
from pairkit.errors import PairkitError, UsageError
from pairkit.index.search import row_dots

SAMPLINGS = ("top", "random", "softmax")
POSITIVE_CHOICES = ("weakest", "random")
FN_MODES = ("eliminate", "attract", "keep")
# Reason codes of a candidate, in the order the rules are applied (first wins).
RULES = ("valid", "padding", "self", "positive", "same_source", "false_negative",
         "max_score", "min_score", "absolute_margin", "relative_margin")
_CODE = {name: i for i, name in enumerate(RULES)}
RANK_BINS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10_000)

Searcher = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
FnFilter = Callable[
    [np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]],
    tuple[np.ndarray, np.ndarray],
]


@dataclass(frozen=True)
class MineConfig:
    """Options of ``pairkit mine`` that shape the selection (see docs/mine.md)."""

    num_negatives: int = 5
    hard: bool = True
    range_min: int = 0
    range_max: int | None = None
    min_score: float | None = None
    max_score: float | None = None
    absolute_margin: float | None = None
    relative_margin: float | None = None
    sampling: str = "top"
    sampling_temperature: float = 0.05
    positive: str = "weakest"
    max_positives: int = 64
    seed: int = 0
    batch_size: int = 16384
    fn_mode: str = "eliminate"  # flagged candidates: eliminate, attract (positives) or keep
    max_k_entries: int = 1 << 24  # scores+ids held at once during retries (~200 MB)

    @property
    def keep_flagged(self) -> bool:
        """``--fn-mode keep``: flagged candidates stay negatives, marked in the table."""
        return self.fn_mode == "keep"

    def window(self) -> tuple[int, int]:
        """``(range_min, range_max)``: valid ranks to sample from. Default range_max:
        range_min + K for ``top``, range_min + 10 K for ``random``/``softmax``."""
        if self.range_max is not None:
            return self.range_min, self.range_max
        width = self.num_negatives * (1 if self.sampling == "top" else 10)
        return self.range_min, self.range_min + width


def validate_config(cfg: MineConfig, n_items: int) -> None:
    """Raise a one-line :class:`UsageError` (contradicting options) or
    :class:`PairkitError` (options that don't fit this store)."""
    k = cfg.num_negatives
    if k < 1:
        raise UsageError(f"--num-negatives must be >= 1, got {k}")
    if cfg.range_min < 0:
        raise UsageError(f"--range-min must be >= 0, got {cfg.range_min}")
    if cfg.range_max is not None and cfg.range_min >= cfg.range_max:
        raise UsageError(
            f"--range-min must be < --range-max, got {cfg.range_min} >= {cfg.range_max}")
    lo, hi = cfg.window()
    if k > hi - lo:
        raise UsageError(f"--num-negatives must be <= range-max - range-min, got {k}")
    if cfg.sampling not in SAMPLINGS:
        raise UsageError(f"--sampling must be one of {', '.join(SAMPLINGS)}, got {cfg.sampling}")
    if not cfg.sampling_temperature > 0:
        raise UsageError(
            f"--sampling-temperature must be > 0, got {cfg.sampling_temperature}")
    if cfg.positive not in POSITIVE_CHOICES:
        raise UsageError(
            f"--positive must be one of {', '.join(POSITIVE_CHOICES)}, got {cfg.positive}")
    if cfg.fn_mode not in FN_MODES:
        raise UsageError(f"--fn-mode must be one of {', '.join(FN_MODES)}, got {cfg.fn_mode}")
    if (cfg.min_score is not None and cfg.max_score is not None
            and cfg.min_score > cfg.max_score):
        raise UsageError(
            f"--min-score must be <= --max-score, got {cfg.min_score} > {cfg.max_score}")
    for name, value in (("--absolute-margin", cfg.absolute_margin),
                        ("--relative-margin", cfg.relative_margin)):
        if value is not None and value < 0:
            raise UsageError(f"{name} must be >= 0, got {value}")
    if cfg.max_positives < 1:
        raise UsageError(f"--max-positives must be >= 1, got {cfg.max_positives}")
    if cfg.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {cfg.batch_size}")
    if k >= n_items:
        raise PairkitError(
            f"--num-negatives must be < the store's row count ({n_items}), got {k}")


@dataclass
class MineResult:
    """Mined pairs plus the counts behind the summary (see :func:`summary_stats`)."""

    pairs: MinedPairs
    removed: dict[str, int]
    fn_flagged: dict[str, int]
    retries: int = 0
    anchors_retried: int = 0
    k_initial: int = 0
    k_max: int = 0


# -- counter-based randomness ----------------------------------------------------------
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_G = np.uint64(0x9E3779B97F4A7C15)


def hash_uniform(seed: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Uniform floats in (0, 1), a deterministic function of ``(seed, a, b)``
    (splitmix64 of the mixed integers). Shape: broadcast of ``a`` and ``b``."""
    with np.errstate(over="ignore"):
        x = (np.asarray(a, dtype=np.int64).astype(np.uint64) * _G
             + np.uint64(seed & 0xFFFFFFFF) * _M2)
        x = _splitmix(x) ^ np.asarray(b, dtype=np.int64).astype(np.uint64)
        x = _splitmix(x + _G)
    return ((x >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / (1 << 53))


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x + _G
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


# -- positives -------------------------------------------------------------------------
def choose_positives(
    vectors: np.ndarray, anchors: np.ndarray, offsets: np.ndarray, pos_ids: np.ndarray,
    how: str, seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pick each anchor's row positive from its positive set.

    Returns ``(positive (n,) int64, pos_score (n,) float32, ref_score (n,) float32)``:
    the chosen positive, its score, and the weakest positive score (margin reference).
    """
    n = len(anchors)
    counts = np.diff(offsets)
    if n and counts.min() < 1:
        raise PairkitError("internal: an anchor without positives")
    owner = np.repeat(np.arange(n), counts)
    scores = row_dots(vectors, anchors[owner], pos_ids)
    first = offsets[:-1]
    order = np.lexsort((pos_ids, scores, owner))  # per anchor: weakest first, ties by id
    weakest = order[first]
    ref = scores[weakest]
    if how == "weakest":
        chosen = weakest
    else:
        key = hash_uniform(seed + 1, anchors[owner], pos_ids)
        chosen = np.lexsort((key, owner))[first]
    return pos_ids[chosen], scores[chosen], ref


# -- classification of candidates ------------------------------------------------------
@dataclass
class _Ctx:
    vectors: np.ndarray
    sources: np.ndarray
    relation: Relation
    cfg: MineConfig
    fn_filter: FnFilter | None
    pos_offsets: np.ndarray
    pos_ids: np.ndarray


def _classify(
    ctx: _Ctx, rows: np.ndarray, anchors: np.ndarray, ids: np.ndarray, scores: np.ndarray,
    ref: np.ndarray,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Rule code per candidate (0 = valid; see :data:`RULES`), FN flags and reasons.

    ``rows`` index into the run's anchor list (for the positive sets).
    Returns ``(code int8 (n, k), flags bool (n, k) or None, reasons (n, k) or None)``.
    """
    cfg = ctx.cfg
    code = np.zeros(ids.shape, dtype=np.int8)
    pad = ids < 0
    safe = np.maximum(ids, 0)
    is_self = ids == anchors[:, None]
    is_pos = ctx.relation.is_positive(anchors, ids)
    same_src = ctx.sources[safe] == ctx.sources[anchors][:, None]
    # apply in reverse order so the first rule in RULES wins
    s = scores
    if cfg.relative_margin is not None:
        code[s > (ref - cfg.relative_margin * np.abs(ref))[:, None]] = _CODE["relative_margin"]
    if cfg.absolute_margin is not None:
        code[s > (ref - cfg.absolute_margin)[:, None]] = _CODE["absolute_margin"]
    if cfg.min_score is not None:
        code[s < cfg.min_score] = _CODE["min_score"]
    if cfg.max_score is not None:
        code[s > cfg.max_score] = _CODE["max_score"]
    excluded = pad | is_self | is_pos | same_src
    flags = reasons = None
    if ctx.fn_filter is not None:
        cand = np.where(excluded, -1, ids)
        pos_lists = [ctx.pos_ids[ctx.pos_offsets[r]:ctx.pos_offsets[r + 1]] for r in rows]
        flags, reasons = ctx.fn_filter(anchors, cand, scores, ref, pos_lists)
        flags = np.asarray(flags, dtype=bool) & ~excluded
        if cfg.fn_mode != "keep":
            code[flags] = _CODE["false_negative"]
    code[same_src] = _CODE["same_source"]
    code[is_pos] = _CODE["positive"]
    code[is_self] = _CODE["self"]
    code[pad] = _CODE["padding"]
    return code, flags, reasons


@dataclass
class _Block:
    """Selection of one set of anchors (arrays of n rows)."""

    neg_pos: np.ndarray  # (n, K) column index into the candidate matrix, -1 none
    ids: np.ndarray
    scores: np.ndarray
    code: np.ndarray
    flags: np.ndarray | None
    reasons: np.ndarray | None
    vrank: np.ndarray
    short: np.ndarray  # (n,) bool: fewer than hi valid and more could be found


def _select(
    ctx: _Ctx, rows: np.ndarray, anchors: np.ndarray, ids: np.ndarray, scores: np.ndarray,
    ref: np.ndarray, exhausted: np.ndarray, hard: bool,
) -> _Block:
    cfg = ctx.cfg
    K = cfg.num_negatives
    lo, hi = cfg.window() if hard else (0, K)
    code, flags, reasons = _classify(ctx, rows, anchors, ids, scores, ref)
    valid = code == 0
    vrank = np.cumsum(valid, axis=1) - 1
    nvalid = valid.sum(axis=1)
    short = (nvalid < hi) & ~exhausted
    in_win = valid & (vrank >= lo) & (vrank < hi)
    if not hard or cfg.sampling == "top":
        key = vrank.astype(np.float64)
    else:
        u = hash_uniform(cfg.seed, anchors[:, None], np.maximum(ids, 0))
        if cfg.sampling == "random":
            key = u
        else:  # Gumbel-top-k = sampling without replacement from softmax(score / T)
            key = -(scores.astype(np.float64) / cfg.sampling_temperature - np.log(-np.log(u)))
    key = np.where(in_win, key, np.inf)
    kk = min(K, key.shape[1])
    pick = np.argsort(key, axis=1, kind="stable")[:, :kk]
    ok = np.isfinite(np.take_along_axis(key, pick, 1))
    # output in rank order
    pick_rank = np.where(ok, np.take_along_axis(vrank, pick, 1), np.iinfo(np.int64).max)
    order = np.argsort(pick_rank, axis=1, kind="stable")
    pick = np.take_along_axis(pick, order, 1)
    ok = np.take_along_axis(ok, order, 1)
    neg_pos = np.full((len(anchors), K), -1, dtype=np.int64)
    neg_pos[:, :kk] = np.where(ok, pick, -1)
    return _Block(neg_pos, ids, scores, code, flags, reasons, vrank, short)


def _take(block: _Block, mask: np.ndarray) -> _Block:
    """The rows ``mask`` of ``block``."""
    def t(x: np.ndarray | None) -> np.ndarray | None:
        return None if x is None else x[mask]
    return _Block(block.neg_pos[mask], block.ids[mask], block.scores[mask], block.code[mask],
                  t(block.flags), t(block.reasons), block.vrank[mask], block.short[mask])


def _easy_candidates(anchors: np.ndarray, m: int, n_items: int, seed: int) -> np.ndarray:
    """(n, m) int64 uniform draws (with replacement) of items, draws 0..m-1 of each anchor
    (a longer retry repeats the same first draws)."""
    j = np.arange(m, dtype=np.int64)
    u = hash_uniform(seed + 2, anchors[:, None], j[None, :])
    ids = np.minimum((u * n_items).astype(np.int64), n_items - 1)
    return ids


def _dedup_rows(ids: np.ndarray) -> np.ndarray:
    """Replace later repeats of an id within a row by -1 (order kept)."""
    order = np.argsort(ids, axis=1, kind="stable")
    s = np.take_along_axis(ids, order, 1)
    dup_sorted = np.zeros(ids.shape, dtype=bool)
    dup_sorted[:, 1:] = s[:, 1:] == s[:, :-1]
    dup = np.zeros(ids.shape, dtype=bool)
    np.put_along_axis(dup, order, dup_sorted, 1)
    return np.where(dup, -1, ids)


def mine_negatives(
    vectors: np.ndarray,
    sources: np.ndarray,
    relation: Relation,
    config: MineConfig,
    searcher: Searcher | None = None,
    fn_filter: FnFilter | None = None,
    progress: Callable[[int], None] | None = None,
    anchor_searcher: Searcher | None = None,
    map_blocks: MapBlocks | None = None,
) -> MineResult:
    """Mine K negatives for every anchor of ``relation``.

    ``vectors`` (N, d) L2-normalised; ``sources`` (N,) int64 source codes;
    ``searcher(queries, k) -> (scores, ids)`` (nq, k), best first (needed with
    ``config.hard``; e.g. :func:`pairkit.index.search.knn_search` on an index);
    ``fn_filter(anchors, cand_ids, cand_scores, ref_scores, positives) -> (flags, reasons)``
    flags false negatives among candidates (excluded ones are passed as -1);
    ``anchor_searcher(anchor_rows, k) -> (scores, ids)``, when given, replaces
    ``searcher`` and is called with row ids (e.g. a search that skips the anchor's
    own cluster, :class:`pairkit.index.outside.OutsideSearcher`).
    ``map_blocks(fn, shared, spans)`` runs ``fn(shared, span)`` for every block of
    anchors and yields the results in order (default: here, one after the other;
    :func:`pairkit.distributed.pool.ray_map_blocks` runs them on a Ray cluster): each block is
    :func:`mine_block`, so the result is the same wherever the blocks run.

    Returns a :class:`MineResult`; raises :class:`PairkitError` when the relation
    gives no anchor a positive.
    """
    cfg = config
    n_items = len(vectors)
    validate_config(cfg, n_items)
    if cfg.hard and searcher is None and anchor_searcher is None:
        raise UsageError("hard-negative mining needs a search function")
    anchors = relation.anchors()
    if len(anchors) == 0:
        raise PairkitError(
            f"the relation {relation.kind} gives no item a positive: nothing to mine "
            "(try another --relation)")
    offsets, pos_ids = relation.positive_sets(anchors, cfg.seed, cfg.max_positives)
    positives, pos_scores, ref = choose_positives(vectors, anchors, offsets, pos_ids,
                                                  cfg.positive, cfg.seed)
    ctx = _Ctx(vectors, np.asarray(sources, dtype=np.int64), relation, cfg, fn_filter,
               offsets, pos_ids)
    K = cfg.num_negatives
    lo, hi = cfg.window() if cfg.hard else (0, K)
    n = len(anchors)
    # headroom: the largest exclusion set (own source, positives) plus the window
    src_sizes = np.bincount(ctx.sources) if n_items else np.zeros(1, np.int64)
    excl = int(src_sizes.max()) + int(np.diff(offsets).max())
    if relation.group is not None and relation.kind == "label":
        g = relation.group[relation.group >= 0]
        excl += int(np.median(np.bincount(g))) if len(g) else 0
    extra_fn = hi if fn_filter is not None else 0
    k0 = min(n_items, hi + 1 + excl + extra_fn + (hi if cfg.hard else 3 * K))
    result = MineResult(
        pairs=MinedPairs(anchors, positives, pos_scores,
                         np.full((n, K), -1, np.int64), np.full((n, K), np.nan, np.float32),
                         np.full((n, K), -1, np.int64)),
        removed={r: 0 for r in RULES[2:]}, fn_flagged={}, k_initial=k0, k_max=k0,
    )
    keep_flags = fn_filter is not None and cfg.fn_mode in ("keep", "attract")
    if keep_flags:
        result.pairs.neg_flags = np.zeros((n, K), bool)
        result.pairs.neg_reasons = np.full((n, K), None, dtype=object)
    blocks = MineBlocks(ctx, anchors, positives, pos_scores, ref, k0,
                        n_items if cfg.hard else 16 * n_items, hi, keep_flags, searcher,
                        anchor_searcher)
    spans = [(b0, min(n, b0 + cfg.batch_size)) for b0 in range(0, n, cfg.batch_size)]
    attract: list[tuple[np.ndarray, ...]] = []
    run = map_blocks or _map_here
    for (b0, b1), part in zip(spans, run(mine_block, blocks, spans), strict=True):
        _merge(result, part, b0, attract)
        if progress is not None:
            progress(b1 - b0)
    if attract:
        result.pairs.fn_rows = np.concatenate([a[0] for a in attract])
        result.pairs.fn_ids = np.concatenate([a[1] for a in attract])
        result.pairs.fn_scores = np.concatenate([a[2] for a in attract])
        result.pairs.fn_ranks = np.full(len(result.pairs.fn_ids), -1, np.int64)
        result.pairs.fn_reasons = np.concatenate([a[3] for a in attract])
    return result


MapBlocks = Callable[[Callable[[Any, Any], Any], Any, list[tuple[int, int]]], Iterator[Any]]


def _map_here(fn: Callable[[Any, Any], Any], shared: Any,
              spans: list[tuple[int, int]]) -> Iterator[Any]:
    """``fn(shared, span)`` for each span, in this process, in order."""
    return (fn(shared, span) for span in spans)


@dataclass
class MineBlocks:
    """What every block of anchors needs, computed once per run (and shipped once to the
    workers of a Ray cluster): rows are indices into ``anchors``."""

    ctx: _Ctx
    anchors: np.ndarray
    positives: np.ndarray
    pos_scores: np.ndarray
    ref: np.ndarray
    k0: int
    k_cap: int
    hi: int
    keep_flags: bool
    searcher: Searcher | None
    anchor_searcher: Searcher | None


def _fetch(st: MineBlocks, rows: np.ndarray, k: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates of the anchors ``rows``: ``(scores, ids, exhausted)``."""
    cfg = st.ctx.cfg
    vectors = st.ctx.vectors
    n_items = len(vectors)
    a = st.anchors[rows]
    if cfg.hard:
        if st.anchor_searcher is not None:
            s, i = st.anchor_searcher(a, k)
        else:
            s, i = st.searcher(np.asarray(vectors[a], dtype=np.float32), k)  # type: ignore[misc]
        exhausted = np.full(len(rows), k >= n_items) | (i[:, -1] < 0)
        if cfg.min_score is not None:
            exhausted |= s[:, -1] < cfg.min_score  # everything deeper scores lower
        return s, i, exhausted
    i = _dedup_rows(_easy_candidates(a, k, n_items, cfg.seed))
    s = np.full(i.shape, -np.inf, dtype=np.float32)
    ok = i >= 0
    s[ok] = row_dots(vectors, np.broadcast_to(a[:, None], i.shape)[ok], i[ok])
    return s, i, np.zeros(len(rows), dtype=bool)


def mine_block(st: MineBlocks, span: tuple[int, int]) -> MineResult:
    """The negatives of anchors ``span[0] .. span[1] - 1``: a :class:`MineResult` whose
    arrays (and attracted rows) are relative to ``span[0]``. Anchors that come up short
    are searched again with 4x the k until they have the window or the store is
    exhausted (:func:`mine_negatives`)."""
    cfg = st.ctx.cfg
    b0, b1 = span
    n, K = b1 - b0, cfg.num_negatives
    part = MineResult(
        pairs=MinedPairs(st.anchors[b0:b1], st.positives[b0:b1], st.pos_scores[b0:b1],
                         np.full((n, K), -1, np.int64), np.full((n, K), np.nan, np.float32),
                         np.full((n, K), -1, np.int64)),
        removed={r: 0 for r in RULES[2:]}, fn_flagged={}, k_initial=st.k0, k_max=st.k0,
    )
    if st.keep_flags:
        part.pairs.neg_flags = np.zeros((n, K), bool)
        part.pairs.neg_reasons = np.full((n, K), None, dtype=object)
    attract: list[tuple[np.ndarray, ...]] = []
    bs = cfg.batch_size
    pending = np.arange(b0, b1)
    k = st.k0
    while len(pending):
        step = bs if k == st.k0 else max(1, cfg.max_k_entries // max(k, 1))
        still: list[np.ndarray] = []
        for c0 in range(0, len(pending), step):
            rows = pending[c0:c0 + step]
            s, i, exh = _fetch(st, rows, k)
            block = _select(st.ctx, rows, st.anchors[rows], i, s, st.ref[rows],
                            exh | (k >= st.k_cap), cfg.hard)
            done = ~block.short
            _collect(part, _take(block, done), rows[done] - b0, st.hi, cfg, st.keep_flags,
                     attract)
            still.append(rows[block.short])
        pending = np.concatenate(still) if still else np.zeros(0, np.int64)
        if len(pending):
            if k == st.k0:
                part.anchors_retried += len(pending)
            part.retries += 1
            k = min(st.k_cap, k * 4)
            part.k_max = max(part.k_max, k)
    if attract:
        part.pairs.fn_rows = np.concatenate([a[0] for a in attract])
        part.pairs.fn_ids = np.concatenate([a[1] for a in attract])
        part.pairs.fn_scores = np.concatenate([a[2] for a in attract])
        part.pairs.fn_reasons = np.concatenate([a[3] for a in attract])
    return part


def _merge(result: MineResult, part: MineResult, b0: int,
           attract: list[tuple[np.ndarray, ...]]) -> None:
    """Write a block's :class:`MineResult` (from :func:`mine_block`) into ``result``."""
    p, q = result.pairs, part.pairs
    rows = slice(b0, b0 + len(q.neg_ids))
    p.neg_ids[rows], p.neg_scores[rows], p.neg_ranks[rows] = (q.neg_ids, q.neg_scores,
                                                              q.neg_ranks)
    if p.neg_flags is not None and q.neg_flags is not None:
        p.neg_flags[rows], p.neg_reasons[rows] = q.neg_flags, q.neg_reasons
    for name, count in part.removed.items():
        result.removed[name] = result.removed.get(name, 0) + count
    for name, count in part.fn_flagged.items():
        result.fn_flagged[name] = result.fn_flagged.get(name, 0) + count
    result.retries += part.retries
    result.anchors_retried += part.anchors_retried
    result.k_max = max(result.k_max, part.k_max)
    if q.fn_rows is not None and len(q.fn_rows):
        attract.append((q.fn_rows + b0, q.fn_ids, q.fn_scores, q.fn_reasons))


def _collect(result: MineResult, block: _Block, rows: np.ndarray, hi: int, cfg: MineConfig,
             keep_flags: bool, attract: list[tuple[np.ndarray, ...]]) -> None:
    """Write a block's selection into ``result`` and add its rule counts."""
    p = result.pairs
    sel = block.neg_pos
    ok = sel >= 0
    safe = np.maximum(sel, 0)
    p.neg_ids[rows] = np.where(ok, np.take_along_axis(block.ids, safe, 1), -1)
    p.neg_scores[rows] = np.where(ok, np.take_along_axis(block.scores, safe, 1), np.nan)
    p.neg_ranks[rows] = np.where(ok & cfg.hard, np.take_along_axis(block.vrank, safe, 1), -1)
    if keep_flags and block.flags is not None:
        p.neg_flags[rows] = ok & np.take_along_axis(block.flags, safe, 1)
        reasons = np.take_along_axis(block.reasons, safe, 1)
        p.neg_reasons[rows] = np.where(p.neg_flags[rows], reasons, None)
    # counts over the examined candidates: up to the one that completed the window
    valid = block.code == 0
    before = np.cumsum(valid, axis=1) - valid
    examined = (before < hi) & (block.code != _CODE["padding"])
    codes = block.code[examined]
    counts = np.bincount(codes, minlength=len(RULES))
    for name in RULES[2:]:
        result.removed[name] += int(counts[_CODE[name]])
    if block.flags is not None:
        f = block.flags & examined
        values, counts_ = np.unique(block.reasons[f].astype(str), return_counts=True)
        for reason, count in zip(values, counts_, strict=True):
            for r in str(reason).split("|"):
                result.fn_flagged[r] = result.fn_flagged.get(r, 0) + int(count)
        if cfg.fn_mode == "attract":
            # flagged candidates become extra positives: the first K per anchor
            order_pos = np.where(f, np.arange(f.shape[1])[None, :], np.iinfo(np.int64).max)
            first = np.argsort(order_pos, axis=1, kind="stable")[:, : cfg.num_negatives]
            take = np.take_along_axis(f, first, 1)
            r, c = np.nonzero(take)
            cols = first[r, c]
            attract.append((rows[r], block.ids[r, cols], block.scores[r, cols],
                            block.reasons[r, cols].astype(object)))


def summary_stats(result: MineResult, K: int, hard: bool) -> dict[str, Any]:
    """JSON-ready statistics: anchors, negatives per anchor, score quantiles, rank
    histogram, candidates removed by each rule, FN flags per rule."""
    p = result.pairs
    per = p.negatives_per_anchor
    neg = p.neg_scores[p.neg_ids >= 0]
    qs = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)

    def quant(x: np.ndarray) -> dict[str, float] | None:
        if len(x) == 0:
            return None
        return {f"q{int(q * 100):02d}": round(float(v), 6)
                for q, v in zip(qs, np.quantile(x.astype(np.float64), qs), strict=True)}

    hist = np.bincount(per, minlength=K + 1)
    stats: dict[str, Any] = {
        "anchors": int(len(p.anchors)),
        "anchors_short": int((per < K).sum()),
        "anchors_without_negatives": int((per == 0).sum()),
        "negatives": int(per.sum()),
        "negatives_per_anchor": {
            "mean": round(float(per.mean()), 4) if len(per) else 0.0,
            "min": int(per.min()) if len(per) else 0,
            "max": int(per.max()) if len(per) else 0,
            "histogram": {str(i): int(c) for i, c in enumerate(hist)},
        },
        "pos_score": quant(p.pos_scores),
        "neg_score": quant(neg),
        "removed": dict(result.removed),
        "fn_flagged": dict(sorted(result.fn_flagged.items())),
        "attracted": int(len(p.fn_ids)) if p.fn_ids is not None else 0,
        "retries": result.retries,
        "anchors_retried": result.anchors_retried,
        "k_initial": result.k_initial,
        "k_max": result.k_max,
    }
    if hard:
        ranks = p.neg_ranks[p.neg_ids >= 0]
        edges = [*RANK_BINS, max(RANK_BINS[-1] + 1, int(ranks.max()) + 1 if len(ranks) else 0)]
        h, _ = np.histogram(ranks, bins=edges)
        stats["rank_histogram"] = {
            (f"{a}" if b - a == 1 else f"{a}-{b - 1}"): int(c)
            for a, b, c in zip(edges[:-1], edges[1:], h, strict=True)
        }
    return stats


# -- the whole command, store in, table out ---------------------------------------------
@dataclass(frozen=True)
class IndexOptions:
    """How ``mine`` finds candidates (see :func:`pairkit.index.build.prepare_index`)."""

    kind: str = "auto"
    nprobe: int | None = None
    ef_search: int | None = None
    nlist: int | None = None
    exact_max_rows: int | None = None
    float16: bool = False
    batch_size: int = 8192
    backend: str = "auto"  # auto, faiss, torch (pairkit.index.backend)
    device: str = "auto"  # where the search runs: auto, cpu, cuda, cuda:N


def _timed(searcher: Searcher, total: list[float]) -> Searcher:
    """``searcher`` that adds its seconds to ``total[0]`` (the summary's search time)."""
    import time

    def search(queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        t = time.perf_counter()
        try:
            return searcher(queries, k)
        finally:
            total[0] += time.perf_counter() - t

    return search


def mine_store(
    store: Any,
    relation: str | None,
    config: MineConfig,
    index: IndexOptions | None = None,
    fn_config: Any = None,
    fmt: str = "triplet",
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    map_blocks: MapBlocks | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Mine a :class:`pairkit.core.store.Store`; returns ``(pair table, stats dict)``.

    ``relation``: ``instance``, ``label``, ``pairs:FILE`` or None (the store's
    default). ``fn_config``: a ``FalseNegativeConfig`` to flag false negatives
    among the candidates (None: no flags). ``on_start(n_anchors)`` is called
    once the anchors are known (for a progress bar). ``map_blocks``: where the
    blocks of anchors run (:func:`mine_negatives`); the index and the false-negative
    context are built here once either way.
    """
    import time

    from pairkit.core.pairs import FORMATS, build_pair_table
    from pairkit.core.relations import load_relation

    t0 = time.perf_counter()
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {fmt}")
    if store.count == 0:
        raise PairkitError(f"store {store.root} is empty: nothing to mine")
    validate_config(config, store.count)
    items = store.items
    rel = load_relation(relation, items)
    vectors = store.vectors(np.float32)
    sources = store.source_codes()
    index = index or IndexOptions()
    from pairkit.index.backend import for_index_kind
    from pairkit.index.build import search_backend

    where = for_index_kind(search_backend(index.backend, index.device), index.kind)
    t_index = time.perf_counter()
    fn_filter = None
    parts = None
    skipped: dict[str, Any] = {}  # what the search skips: ctx.cache["outside"]
    ctx = None
    if fn_config is not None:
        from pairkit.mine import false_negatives as fnm

        sha = items["file_sha256"].to_numpy(dtype=object, na_value=None)
        ctx = fnm.build_context(vectors, store.labels(), sources, fn_config, seed=config.seed,
                                file_sha256=sha if any(v is not None for v in sha) else None,
                                views=items["view"].to_numpy(), backend=where)
        parts = outside_parts(ctx, fn_config, config)  # (runs, N) cluster ids or None
        if parts is not None:
            skipped = ctx.cache.get("outside", {})
        if parts is not None and ctx.groups is None:
            # a near-duplicate of the anchor (or of its positive) shares its clusters, so
            # the search never offers it; the rare one across a border is caught by
            # comparing each offered candidate with the threshold, without the store-wide
            # range search that grouping needs
            ctx.cache["pairwise_near_duplicates"] = True

        if map_blocks is not None and "near-duplicate" in fn_config.rules:
            # computed on first use otherwise: here once, not once per worker
            from pairkit.mine.fn_context import near_duplicate_group_ids

            near_duplicate_group_ids(ctx, fn_config)

        def fn_filter(a: np.ndarray, c: np.ndarray, s: np.ndarray, r: np.ndarray,
                      pos: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
            return fnm.flag_false_negatives(ctx, a, c, s, r, fn_config, positives=pos)

    t_fn = time.perf_counter()
    searcher = anchor_searcher = None
    index_text = "none (easy negatives: uniform sample)"
    search_time = [0.0]
    if config.hard and parts is None:
        from pairkit.index.build import prepare_index

        loaded = prepare_index(
            vectors, index.kind, store_root=store.local_root, content_id=store.content_id,
            exact_max_rows=index.exact_max_rows, nlist=index.nlist, nprobe=index.nprobe,
            ef_search=index.ef_search, float16=index.float16, seed=config.seed,
            backend=where)
        searcher = _timed(loaded.searcher(vectors, batch_size=index.batch_size), search_time)
        index_text = loaded.describe()
    elif config.hard:
        anchor_searcher, index_text = _outside_searcher(
            vectors, parts, index, config.seed, where, store_root=store.local_root,
            content_id=store.content_id, votes=int(skipped.get("votes", 1)),
            what=skipped.get("what", "cluster"))

    if on_start is not None:
        on_start(len(rel.anchors()))
    t1 = time.perf_counter()
    result = mine_negatives(vectors, sources, rel, config, searcher, fn_filter, progress,
                            anchor_searcher=anchor_searcher, map_blocks=map_blocks)
    table = build_pair_table(result.pairs, fmt, store.content_id,
                             items["path"].to_numpy(dtype=object),
                             flag_columns=fn_config is not None and config.keep_flagged)
    stats = summary_stats(result, config.num_negatives, config.hard)
    lo, hi = config.window()
    stats = {
        "store": str(store.root),
        "store_id": store.content_id,
        "items": int(store.count),
        "relation": rel.description,
        "hard": config.hard,
        "index": index_text,
        "format": fmt,
        "rows": int(len(table)),
        **stats,
        "window": [lo, hi] if config.hard else None,
        "sampling": config.sampling if config.hard else "uniform",
        "seed": config.seed,
        "false_negative_rules": list(fn_config.rules) if fn_config is not None else [],
        "clusters": _cluster_stats(ctx, fn_config) if fn_config is not None else None,
        "cluster_rows_not_searched": skipped.get("what") == "cluster",
        "label_rows_not_searched": skipped.get("what") == "label",
        "fn_mode": config.fn_mode if fn_config is not None else None,
        "seconds": {"setup": round(t1 - t0, 3), "mine": round(time.perf_counter() - t1, 3),
                    "false_negative_context": round(t_fn - t_index, 3),
                    "index": round(t1 - t_fn, 3), "search": round(search_time[0], 3)},
    }
    if fn_config is not None:
        from pairkit.mine.fn_estimate import estimate_quality

        stats["fn_estimate"] = estimate_quality(ctx, fn_config, seed=config.seed)
    labels = store.labels()
    if labels is not None:
        stats["negatives_same_label"] = same_label_share(result.pairs, labels)
    if rel.kind == "pairs":
        stats["pairs_rows"] = rel.rows_total
        stats["pairs_rows_unknown"] = rel.rows_unknown
        stats["pairs_unknown_examples"] = list(rel.unknown_examples)
    return table, stats


def outside_parts(ctx: Any, fn_config: Any, config: MineConfig) -> np.ndarray | None:
    """The partition whose own part an anchor's search may skip, or None.

    Skipping is exact only when every candidate skipped would be flagged and dropped
    anyway: the ``cluster`` rule on (and not turned off by its random-pair guard, see
    :func:`pairkit.mine.rules.cluster.choose_votes`), flagged candidates eliminated (not
    kept or attracted), hard mining, and no pair decided by trusted labels instead of
    the rule. The rows skipped are those sharing the anchor's cluster in at least the
    rule's votes of the runs.

    With the ``label`` rule trusted and every row labelled, the labels decide every
    pair: the partition is the labels (rows of the anchor's label are not searched;
    without this, a class of many rows sends each anchor's search ever deeper for its
    first candidate of another class). Records what was used in
    ``ctx.cache["outside"]`` (``what``: label or cluster, ``votes``).
    """
    if not (config.hard and config.fn_mode == "eliminate" and not config.keep_flagged):
        return None
    if fn_config.trust_labels and "label" in fn_config.rules and ctx.labels is not None:
        from pairkit.mine.fn_context import label_codes

        codes = label_codes(ctx)
        if codes is not None and (codes >= 0).all() and len(np.unique(codes)) > 1:
            ctx.cache["outside"] = {"what": "label", "votes": 1}
            return np.asarray(codes, dtype=np.int64)[None, :]
        if codes is not None and (codes >= 0).any():
            return None
    if "cluster" not in fn_config.rules:
        return None
    assign = ctx.cluster_assign
    if assign is None or len(assign) == 0 or len(np.unique(assign[0])) < 2:
        return None
    from pairkit.mine.rules.cluster import votes_needed

    votes = votes_needed(ctx, fn_config)
    if votes == 0:
        return None
    ctx.cache["outside"] = {"what": "cluster", "votes": votes}
    return assign


def _outside_searcher(vectors: np.ndarray, assign: np.ndarray, index: IndexOptions,
                      seed: int, engine: Any = None, store_root: Any = None,
                      content_id: str | None = None, votes: int = 1,
                      what: str = "cluster") -> tuple[Any, str]:
    """An anchor searcher that skips the rows sharing the anchor's cluster in at least
    ``votes`` runs. Exact (``flat``, and ``auto`` on a small store): those rows are
    masked out of one exact search. IVF: the store's IVF index (built, or loaded when
    saved) scanned list by list with the same mask. Other kinds, one vote: one index
    per cluster of the first run, the anchor's own not searched (other runs' clusters
    are flagged after); more votes: the plain index (the rule flags after)."""
    from pairkit.index.build import EXACT_MAX_ROWS_CPU, choose_kind, prepare_index
    from pairkit.index.outside import OutsideSearcher, masked_exact_search

    which = "any" if votes == 1 else f"at least {votes}"
    skipped = (f"rows sharing a cluster with the anchor in {which} of {len(assign)} k-means "
               "runs not searched (cluster rule)" if what == "cluster" else
               "rows of the anchor's label not searched (label rule)")
    if engine is not None and engine.name == "torch":
        from pairkit.index.torch_search import TorchFlatIndex

        tindex = TorchFlatIndex(vectors, device=engine.device)
        return (lambda rows, k: tindex.search_masked(vectors[rows], k, assign[:, rows],
                                                     assign, votes=votes)), (
            f"exact, {engine.describe()}; {skipped}")
    kind = index.kind
    if kind == "auto":
        kind, _ = choose_kind(len(vectors), index.exact_max_rows or EXACT_MAX_ROWS_CPU)
    if kind == "flat" and not index.float16:
        return (lambda rows, k: masked_exact_search(vectors, assign, rows, k, votes=votes)), (
            f"flat (exact), {skipped}")
    if kind == "ivf" and not index.float16:
        loaded = prepare_index(vectors, kind, store_root=store_root, content_id=content_id,
                               nlist=index.nlist, nprobe=index.nprobe, device="cpu", seed=seed,
                               backend="faiss")
        from pairkit.index.outside import MaskedIvfSearch
        from pairkit.index.search import IvfListMajor

        if IvfListMajor.supports(loaded.index):
            masked = MaskedIvfSearch(loaded.index, assign, loaded.spec.nprobe or 1,
                                     votes=votes)
            text = f"{loaded.describe()}; cells and {skipped}"
            return (lambda rows, k: masked.search(rows, k, vectors[rows])), text
    if votes > 1:  # the per-cluster indices skip one run's cluster: too much here
        loaded = prepare_index(vectors, index.kind, store_root=store_root,
                               content_id=content_id, exact_max_rows=index.exact_max_rows,
                               nlist=index.nlist, nprobe=index.nprobe,
                               ef_search=index.ef_search, float16=index.float16, seed=seed,
                               backend=engine if engine is not None else "auto")
        full = loaded.searcher(vectors, batch_size=index.batch_size)
        return (lambda rows, k: full(vectors[rows], k)), loaded.describe()
    parts = assign[0]
    where: list[str] = []

    def make(sub: np.ndarray) -> Any:
        sub_kind = kind if kind == "flat" or len(sub) > 4096 else "flat"
        loaded = prepare_index(sub, sub_kind, nprobe=index.nprobe, ef_search=index.ef_search,
                               float16=index.float16, seed=seed, device=index.device,
                               backend=engine if engine is not None else "auto")
        where.append("GPU" if loaded.gpu else "CPU")
        return loaded.searcher(sub, batch_size=index.batch_size)

    outside = OutsideSearcher(vectors, parts, make)
    n_parts = len(outside.labels)
    text = (f"{kind} per cluster ({n_parts} clusters), built now; the anchor's own cluster "
            "is not searched (cluster rule)")
    return outside.search, text


def _cluster_stats(ctx: Any, fn_config: Any) -> dict[str, Any] | None:
    """What the cluster rule chose: number of clusters (auto or given), the leading
    eigenvalues it was read from, runs and votes."""
    info = getattr(ctx, "cluster_info", None)
    if not info:
        return None
    shown = {k: v for k, v in info.items() if k != "votes_for"}
    return {"runs": fn_config.cluster_runs, "votes": fn_config.cluster_votes, **shown}


def same_label_share(pairs: MinedPairs, labels: np.ndarray) -> float | None:
    """Share of mined negatives whose label equals their anchor's (both labelled):
    the exact false-negative share where labels define "the same thing"."""
    import pandas as pd

    codes, _ = pd.factorize(pd.Series(labels, dtype=object), use_na_sentinel=True)
    ok = pairs.neg_ids >= 0
    a = np.broadcast_to(codes[pairs.anchors][:, None], ok.shape)[ok]
    c = codes[np.maximum(pairs.neg_ids, 0)][ok]
    both = (a >= 0) & (c >= 0)
    return round(float((a[both] == c[both]).mean()), 4) if both.any() else None
