"""Choosing each anchor's positive and negatives from its candidates: pure functions over
arrays of one block of anchors (no search, no I/O).

A candidate gets one code of :data:`CANDIDATE_CODES` (the first rule that applies wins):
``valid`` candidates are ranked 0, 1, 2, ... by score, and K of those in the rank window
are taken (``top``: the first K; ``random``: K uniformly; ``softmax``: K without
replacement with probability proportional to ``exp(score / T)``, Gumbel-top-k).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pairkit.core.relations import Relation
from pairkit.errors import PairkitError
from pairkit.index.search import rounded_depths, row_dots
from pairkit.mine.config import MineConfig
from pairkit.mine.randomness import hash_uniform

# Code of a candidate, in the order the rules are applied (first wins); the counts of
# CANDIDATE_CODES[2:] are the summary's "candidates removed".
CANDIDATE_CODES = ("valid", "padding", "self", "positive", "same_source", "false_negative",
                   "max_score", "min_score", "absolute_margin", "relative_margin")
CODE = {name: i for i, name in enumerate(CANDIDATE_CODES)}

# fn_filter(anchors, cand_ids, cand_scores, ref_scores, positives (n, p) -1 padded)
FnFilter = Callable[
    [np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    tuple[np.ndarray, np.ndarray],
]


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
    if n and counts.max() == 1:  # one positive each (two views): it is every choice
        scores = pair_dots(vectors, anchors, pos_ids)
        return pos_ids, scores, scores.copy()
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


def padded_rows(offsets: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(len(rows), p) int64: the ragged lists ``ids[offsets[r]:offsets[r + 1]]`` of
    ``rows``, -1 padded to the longest (p >= 1)."""
    start = offsets[rows]
    counts = offsets[rows + 1] - start
    width = max(int(counts.max(initial=0)), 1)
    col = np.arange(width)
    inside = col[None, :] < counts[:, None]
    at = np.where(inside, start[:, None] + col[None, :], 0)
    return np.where(inside, ids[at] if len(ids) else -1, -1).astype(np.int64)


def pair_dots(vectors: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``row_dots(vectors, a, b)``, each unordered pair computed once when the pairs come
    in both orders (``a`` every row in order and ``b`` its own inverse: the two views of
    each source are each other's positive). The product is symmetric bit for bit."""
    n = len(a)
    if not (n and np.array_equal(a, np.arange(n)) and b.min() >= 0 and b.max() < n
            and np.array_equal(b[b], a)):
        return row_dots(vectors, a, b)
    first = np.flatnonzero(a <= b)
    out = np.empty(n, dtype=np.float32)
    out[first] = row_dots(vectors, a[first], b[first])
    out[b[first]] = out[first]
    return out


@dataclass
class SelectionContext:
    """What classifying a block's candidates needs about the whole run: the store's
    ``vectors`` (N, d) and ``sources`` (N,) int64, the relation, the config, the
    false-negative filter (or None) and the anchors' positive sets (CSR
    ``pos_offsets``/``pos_ids`` over the run's anchor list). ``positives_share_source``:
    the relation's positives are exactly the other rows of the anchor's source (the
    instance relation over these sources), so one comparison serves both rules."""

    vectors: np.ndarray
    sources: np.ndarray
    relation: Relation
    cfg: MineConfig
    fn_filter: FnFilter | None
    pos_offsets: np.ndarray
    pos_ids: np.ndarray
    positives_share_source: bool = False


def classify_candidates(
    ctx: SelectionContext, rows: np.ndarray, anchors: np.ndarray, ids: np.ndarray,
    scores: np.ndarray, ref: np.ndarray, need: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Code per candidate (0 = valid; see :data:`CANDIDATE_CODES`), FN flags and reasons.

    ``rows`` index into the run's anchor list (for the positive sets). ``need``: the
    valid candidates a row's selection reads (the window's end); the false-negative
    rules then judge each row's candidates only up to the one that completes it
    (:func:`flags_until`; later ones are never examined), else all.
    Returns ``(code int8 (n, k), flags bool (n, k) or None, reasons (n, k) or None)``.
    """
    cfg = ctx.cfg
    code = np.zeros(ids.shape, dtype=np.int8)
    pad = ids < 0
    safe = np.maximum(ids, 0)
    is_self = ids == anchors[:, None]
    same_src = ctx.sources[safe] == ctx.sources[anchors][:, None]
    if ctx.positives_share_source:
        is_pos = same_src & ~pad & ~is_self
    else:
        is_pos = ctx.relation.is_positive(anchors, ids)
    # apply in reverse order so the first code in CANDIDATE_CODES wins
    s = scores
    if cfg.relative_margin is not None:
        code[s > (ref - cfg.relative_margin * np.abs(ref))[:, None]] = CODE["relative_margin"]
    if cfg.absolute_margin is not None:
        code[s > (ref - cfg.absolute_margin)[:, None]] = CODE["absolute_margin"]
    if cfg.min_score is not None:
        code[s < cfg.min_score] = CODE["min_score"]
    if cfg.max_score is not None:
        code[np.minimum(s, 1.0) > cfg.max_score] = CODE["max_score"]  # a cosine: <= 1
    excluded = pad | is_self | is_pos | same_src
    flags = reasons = None
    if ctx.fn_filter is not None:
        positives = padded_rows(ctx.pos_offsets, ctx.pos_ids, rows)
        flags, reasons = flags_until(ctx.fn_filter, anchors, ids, scores, ref, positives,
                                     excluded, (code == 0) & ~excluded,
                                     ids.shape[1] if need is None else need,
                                     cfg.fn_mode != "keep")
        if cfg.fn_mode != "keep":
            code[flags] = CODE["false_negative"]
    code[same_src] = CODE["same_source"]
    code[is_pos] = CODE["positive"]
    code[is_self] = CODE["self"]
    code[pad] = CODE["padding"]
    return code, flags, reasons


FIRST_COLUMNS = 64  # flags_until: columns judged at first (at least; 2x the need)


def flags_until(fn_filter: FnFilter, anchors: np.ndarray, ids: np.ndarray,
                scores: np.ndarray, ref: np.ndarray, positives: np.ndarray,
                excluded: np.ndarray, usable: np.ndarray, need: int, invalidates: bool
                ) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`filter_kept` over the leading columns each row reads: the rules judge the
    first ``max(FIRST_COLUMNS, 2 need)`` columns, then 4x as many more for the rows
    that have fewer than ``need`` ``usable`` candidates left unflagged (flags make a
    candidate unusable when ``invalidates``), and so on. A row's later columns are past
    the candidate that completes its window: never selected nor counted (mine's counts
    and attracted candidates are over the examined ones), so the flags left False there
    give the same table as judging them. A search fetches far more than that where an
    anchor's k grew with its exclusions (a big source, a deep retry) while the rows it
    fetched were valid: thousands of candidates per anchor judged by every rule."""
    n, k = ids.shape
    width = max(FIRST_COLUMNS, 2 * need)
    if k <= width:
        return filter_kept(fn_filter, anchors, ids, scores, ref, positives, excluded)
    flags = np.zeros(ids.shape, dtype=bool)
    reasons = None
    todo = np.arange(n)
    start = 0
    while len(todo) and start < k:
        end = min(k, start + width)
        got, why = filter_kept(fn_filter, anchors[todo], ids[todo, start:end],
                               scores[todo, start:end], ref[todo], positives[todo],
                               excluded[todo, start:end])
        flags[todo, start:end] = got
        if why is not None:
            if reasons is None:
                reasons = np.full(ids.shape, None, dtype=object)
            reasons[todo, start:end] = why
        left = usable[todo, :end]
        if invalidates:
            left = left & ~flags[todo, :end]
        todo = todo[left.sum(axis=1) < need]
        start, width = end, 4 * width
    return flags, reasons


def filter_kept(fn_filter: FnFilter, anchors: np.ndarray, ids: np.ndarray,
                scores: np.ndarray, ref: np.ndarray, positives: np.ndarray,
                excluded: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``fn_filter``'s flags and reasons (n, k) for the candidates ``ids`` (n, k) not
    ``excluded`` (those are never flagged: False / None).

    Every rule judges each (anchor, candidate) pair on its own, so where most columns
    are excluded (an approximate search fetches an anchor's big source, thousands of
    rows, and drops them: they are its positives) the rules see only each row's other
    candidates, moved to the front in their order, instead of the whole width: the
    same flags, for a fraction of the rules' time and memory."""
    keep = ~excluded
    width = int(keep.sum(axis=1).max(initial=0))
    if 2 * width > ids.shape[1]:
        flags, reasons = fn_filter(anchors, np.where(excluded, -1, ids), scores, ref,
                                   positives)
        return np.asarray(flags, dtype=bool) & keep, reasons
    order = np.argsort(excluded, axis=1, kind="stable")[:, :width]  # kept columns first
    ok = np.take_along_axis(keep, order, 1)
    cand = np.where(ok, np.take_along_axis(ids, order, 1), -1)
    got, why = fn_filter(anchors, cand, np.take_along_axis(scores, order, 1), ref, positives)
    flags = np.zeros(ids.shape, dtype=bool)
    np.put_along_axis(flags, order, np.asarray(got, dtype=bool) & ok, 1)
    if why is None:
        return flags, None
    reasons = np.full(ids.shape, None, dtype=object)
    np.put_along_axis(reasons, order, np.where(ok, why, None), 1)
    return flags, reasons


@dataclass
class Selection:
    """Selection of one set of anchors (arrays of n rows)."""

    neg_pos: np.ndarray  # (n, K) column index into the candidate matrix, -1 none
    ids: np.ndarray
    scores: np.ndarray
    code: np.ndarray
    flags: np.ndarray | None
    reasons: np.ndarray | None
    vrank: np.ndarray
    short: np.ndarray  # (n,) bool: fewer than hi valid and more could be found

    def take(self, mask: np.ndarray) -> Selection:
        """The rows ``mask`` of this selection (itself when that is every row)."""
        if mask.all():
            return self

        def t(x: np.ndarray | None) -> np.ndarray | None:
            return None if x is None else x[mask]
        return Selection(self.neg_pos[mask], self.ids[mask], self.scores[mask],
                         self.code[mask], t(self.flags), t(self.reasons), self.vrank[mask],
                         self.short[mask])


def select_negatives(
    ctx: SelectionContext, rows: np.ndarray, anchors: np.ndarray, ids: np.ndarray,
    scores: np.ndarray, ref: np.ndarray, exhausted: np.ndarray, hard: bool,
) -> Selection:
    """Classify the candidates ``ids``/``scores`` (n, k) of ``anchors`` and take up to K
    valid ones from the rank window (output in rank order, -1 padded)."""
    cfg = ctx.cfg
    K = cfg.num_negatives
    lo, hi = cfg.window() if hard else (0, K)
    code, flags, reasons = classify_candidates(ctx, rows, anchors, ids, scores, ref, hi)
    valid = code == 0
    vrank = np.cumsum(valid, axis=1, dtype=np.int32) - 1
    nvalid = vrank[:, -1] + 1 if vrank.shape[1] else np.zeros(len(vrank), np.int32)
    short = (nvalid < hi) & ~exhausted
    in_win = valid & (vrank >= lo) & (vrank < hi)
    if not hard or cfg.sampling == "top":
        return Selection(first_in_window(in_win, vrank - lo, K), ids, scores, code, flags,
                         reasons, vrank, short)
    u = hash_uniform(cfg.seed, anchors[:, None], np.maximum(ids, 0))
    # softmax: Gumbel-top-k = sampling without replacement from softmax(score / T)
    key = (u if cfg.sampling == "random"
           else softmax_keys(scores, u, cfg.sampling_temperature))
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
    return Selection(neg_pos, ids, scores, code, flags, reasons, vrank, short)


def softmax_keys(scores: np.ndarray, u: np.ndarray, temperature: float) -> np.ndarray:
    """Ascending sort keys of Gumbel-top-k sampling from softmax(score / T): the order of
    -(s / T + G), G = -log(-log u), computed so that nothing overflows: as -(s + T G)
    (the same order for T > 0) when T <= 1, where 1 / T could overflow (T ~ 1e-309 made
    every key inf and dropped every candidate), and as written when T > 1, where T G
    could. The limit T -> 0 is then ``top``: T G underflows and ties keep rank order."""
    s = scores.astype(np.float64)
    g = -np.log(-np.log(u))
    if temperature <= 1.0:
        return -(s + temperature * g)
    return -(s / temperature + g)


def first_in_window(in_win: np.ndarray, slot: np.ndarray, K: int) -> np.ndarray:
    """(n, K) int64: the columns of the first K window entries of each row, in rank
    order, -1 padded. ``slot`` (n, k): an entry's place in its row's window (its valid
    rank minus the window start: 0, 1, 2, ... along the row)."""
    out = np.full((len(in_win), K), -1, dtype=np.int64)
    r, c = np.nonzero(in_win & (slot < K))
    out[r, slot[r, c]] = c
    return out


def easy_candidates(anchors: np.ndarray, m: int, n_items: int, seed: int,
                    start: int = 0) -> np.ndarray:
    """(n, m - start) int64 uniform draws (with replacement) of items, draws
    start..m-1 of each anchor (a longer retry repeats the same first draws)."""
    j = np.arange(start, m, dtype=np.int64)
    u = hash_uniform(seed + 2, anchors[:, None], j[None, :])
    ids = np.minimum((u * n_items).astype(np.int64), n_items - 1)
    return ids


@dataclass(frozen=True)
class FewOutside:
    """Easy negatives where one part of the relation (a class of the label relation, a
    source of the instance relation) holds all but a few rows: its anchors' valid
    candidates are among those few ``rest`` rows, which uniform draws over the whole
    store would take up to ``16 x rows`` draws per anchor to find (minutes, then hours,
    on a store of one class or of one big source). ``parts`` (N,) codes, ``part`` the
    big one."""

    parts: np.ndarray
    part: int
    rest: np.ndarray


def few_outside(parts: np.ndarray | None, limit: int) -> FewOutside | None:
    """The :class:`FewOutside` of ``parts`` (N,) codes (-1: none) when one code holds
    more than ``N - limit`` rows, else None."""
    if parts is None or len(parts) == 0:
        return None
    codes = parts[parts >= 0]
    if len(codes) == 0:
        return None
    counts = np.bincount(codes)
    big = int(np.argmax(counts))
    if counts[big] <= len(parts) - limit:
        return None
    return FewOutside(parts, big, np.flatnonzero(parts != big))


def enumerated_candidates(anchors: np.ndarray, few: FewOutside, sources: np.ndarray,
                          width: int, seed: int) -> np.ndarray:
    """(n, width) int64: for each anchor (all in ``few.part``), every row of ``few.rest``
    not of its own source, in an order drawn per anchor from the seed (uniform: the order
    in which uniform draws would first meet them is as random), -1 padded. Every valid
    easy candidate of the anchor is among them."""
    out = np.full((len(anchors), width), -1, dtype=np.int64)
    rest = few.rest
    if len(rest) == 0 or len(anchors) == 0:
        return out
    keys = np.asarray(hash_uniform(seed + 3, anchors[:, None], rest[None, :]), np.float64)
    own = sources[rest][None, :] == sources[anchors][:, None]
    order = np.argsort(np.where(own, np.inf, keys), axis=1, kind="stable")  # own ones last
    ids = np.take_along_axis(np.broadcast_to(rest, keys.shape), order, axis=1)
    ids = np.where(np.take_along_axis(own, order, axis=1), -1, ids)
    width = min(width, ids.shape[1])
    out[:, :width] = ids[:, :width]
    return out


def drop_repeats(ids: np.ndarray) -> np.ndarray:
    """Replace later repeats of an id within a row by -1 (order kept)."""
    order = np.argsort(ids, axis=1, kind="stable")
    s = np.take_along_axis(ids, order, 1)
    dup_sorted = np.zeros(ids.shape, dtype=bool)
    dup_sorted[:, 1:] = s[:, 1:] == s[:, :-1]
    dup = np.zeros(ids.shape, dtype=bool)
    np.put_along_axis(dup, order, dup_sorted, 1)
    return np.where(dup, -1, ids)


def initial_k(cfg: MineConfig, relation: Relation, sources: np.ndarray,
              pos_offsets: np.ndarray, n_items: int, filtered: bool,
              class_skipped: bool = False, anchors: np.ndarray | None = None,
              skipped: np.ndarray | None = None) -> np.ndarray:
    """Candidates fetched per anchor at first ((n,) int64 over the anchors of
    ``pos_offsets``): the anchor's own exclusion set (its source, its positives, for the
    label relation a median class) plus the window, with spare for false-negative flags
    (``filtered``); anchors still short are searched again. The own set is rounded up to
    a power of two (at most the largest anchor's), so that a block's anchors share few
    distinct k (one search each), and an anchor of a small source does not fetch the
    largest source's size. ``anchors`` None: every anchor gets the largest.
    ``class_skipped``: the search skips the anchor's class (the label relation), which
    holds all of them: no room for an exclusion set; ``skipped`` (n,) bool: the search
    skips these anchors' own source (the instance relation's big sources), alike."""
    _, hi = cfg.window() if cfg.hard else (0, cfg.num_negatives)
    n = len(pos_offsets) - 1
    src_sizes = np.bincount(sources) if n_items else np.zeros(1, np.int64)
    npos = np.diff(pos_offsets).astype(np.int64)
    if anchors is None:
        own = np.full(n, int(src_sizes.max()) + int(npos.max(initial=0)), np.int64)
    else:
        own = src_sizes[sources[anchors]].astype(np.int64) + npos
    extra_fn = hi if filtered else 0
    if not cfg.hard:
        # easy negatives are uniform draws over the whole store, not the nearest rows: an
        # anchor's class or big source is not fetched first but drawn as often as its
        # share, so the draws it needs are the window over the share of rows that can be
        # valid (a class-sized k, as a search needs, drew 13,000 candidates an anchor on a
        # store of four classes of 5,000: 55 s where 3 s do; the draws come in the same
        # order whatever their number, so the table is the same)
        valid = np.maximum(n_items - own, 1) / max(n_items, 1)
        want = (hi + 1 + extra_fn + 3 * cfg.num_negatives) / np.maximum(valid, 1 / 16)
        return np.minimum(n_items, rounded_depths(np.ceil(want).astype(np.int64)))
    excl = rounded_depths(own)
    if skipped is not None:
        excl = np.where(skipped, 0, excl)
    if class_skipped:
        excl = np.zeros(n, np.int64)
    elif relation.group is not None and relation.kind == "label":
        g = relation.group[relation.group >= 0]
        excl += int(np.median(np.bincount(g))) if len(g) else 0
    return np.minimum(n_items, hi + 1 + excl + extra_fn + hi).astype(np.int64)
