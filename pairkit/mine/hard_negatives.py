"""Hard- and easy-negative mining over a store's vectors: :func:`mine_negatives`, one run.

The pieces: options in :mod:`pairkit.mine.config`, the choice among one block's
candidates in :mod:`pairkit.mine.selection`, blocks and their merge in
:mod:`pairkit.mine.blocks`, randomness in :mod:`pairkit.mine.randomness`; the command
(store in, table out) in :mod:`pairkit.mine.command`.

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
4. Headroom: candidates are fetched with enough spare (the anchor's own exclusion
   set, rounded up to a power of two, plus the window; a big source of the instance
   relation is skipped by an exact search instead); anchors that still come up short
   are searched again with 4x the k until they have the window or the store is
   exhausted.
   Anchors that end with fewer than K negatives are kept and counted.

Without ``--hard`` (easy negatives) candidates are drawn uniformly from the
store and filtered by the same rules, so the K negatives are a uniform sample
of the valid non-positives.

Randomness comes from a counter-based hash of ``(seed, anchor, item)``, so the
output depends only on the seed, not on batch sizes, retries or threads.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pairkit.core.blocks_here import MapBlocks, block_spans, map_here
from pairkit.core.relations import Relation
from pairkit.core.store_rows import StoreRows
from pairkit.errors import PairkitError, UsageError
from pairkit.mine.blocks import (
    Attracted,
    MineBlocks,
    MineResult,
    Searcher,
    empty_result,
    merge_block,
    mine_block,
    set_attracted,
)
from pairkit.mine.config import MineConfig, validate_config
from pairkit.mine.selection import (
    FnFilter,
    SelectionContext,
    choose_positives,
    few_outside,
    initial_k,
)


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
    rows_from: StoreRows | None = None,
) -> MineResult:
    """Mine K negatives for every anchor of ``relation``.

    ``vectors`` (N, d) L2-normalised; ``sources`` (N,) int64 source codes;
    ``searcher(queries, k) -> (scores, ids)`` (nq, k), best first (needed with
    ``config.hard``; e.g. :func:`pairkit.index.search.knn_search` on an index);
    ``fn_filter(anchors, cand_ids, cand_scores, ref_scores, positives) -> (flags, reasons)``
    flags false negatives among candidates (excluded ones are passed as -1);
    ``anchor_searcher(anchor_rows, k) -> (scores, ids)``, when given, replaces
    ``searcher`` and is called with row ids (e.g. a search that skips the anchor's
    own cluster, :func:`pairkit.index.outside.outside_searcher`).
    ``map_blocks(fn, shared, spans)`` runs ``fn(shared, span)`` for every block of
    anchors and yields the results in order (default: here, one after the other;
    ``pairkit.distributed.mine.on_ray`` runs them on a Ray cluster): each block is
    :func:`pairkit.mine.blocks.mine_block`, so the result is the same wherever they run.
    ``rows_from``: the blocks leave ``vectors`` out and read them from the store where
    they run (a cluster's workers), so the driver never ships them.

    Returns a :class:`MineResult`; raises :class:`PairkitError` when the relation
    gives no anchor a positive.
    """
    blocks = plan_blocks(vectors, sources, relation, config, searcher, fn_filter,
                         anchor_searcher, rows_from)
    anchors, cfg = blocks.anchors, config
    n = len(anchors)
    result = empty_result(anchors, blocks.positives, blocks.pos_scores, cfg.num_negatives,
                          blocks.keep_flags, blocks.k0)
    spans = block_spans(n, cfg.batch_size)
    attract: list[Attracted] = []
    run = map_blocks or map_here
    for (b0, b1), part in zip(spans, run(mine_block, blocks, spans), strict=True):
        merge_block(result, part, b0, attract)
        if progress is not None:
            progress(b1 - b0)
    set_attracted(result.pairs, attract)
    return result


def plan_blocks(
    vectors: np.ndarray | None,
    sources: np.ndarray,
    relation: Relation,
    config: MineConfig,
    searcher: Searcher | None = None,
    fn_filter: FnFilter | None = None,
    anchor_searcher: Searcher | None = None,
    rows_from: StoreRows | None = None,
    n_items: int | None = None,
) -> MineBlocks:
    """What every block of :func:`mine_negatives` needs (its arguments, same meaning).
    ``vectors`` None (``rows_from`` and ``n_items`` given): this process holds no vectors;
    the positives are then scored where the blocks run, block by block
    (:meth:`pairkit.mine.blocks.MineBlocks.score_positives`), with the same result."""
    cfg = config
    if vectors is None:
        if rows_from is None or n_items is None:
            raise PairkitError("internal: blocks without vectors need rows_from and n_items")
    else:
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
    if vectors is not None:
        positives, pos_scores, ref = choose_positives(vectors, anchors, offsets, pos_ids,
                                                      cfg.positive, cfg.seed)
    else:
        positives = np.zeros(0, np.int64)
        pos_scores = ref = np.zeros(0, np.float32)
    sources = np.asarray(sources, dtype=np.int64)
    same_groups = relation.group is not None and np.array_equal(relation.group, sources)
    if same_groups:  # the instance relation's groups are the sources: one array for both
        sources = relation.group
    dim = 0 if vectors is None else vectors.shape[1]
    ctx = SelectionContext(vectors if vectors is not None else np.zeros((0, dim), np.float32),
                           sources, relation, cfg, fn_filter, offsets, pos_ids,
                           positives_share_source=relation.kind == "instance" and same_groups)
    _, hi = cfg.window() if cfg.hard else (0, cfg.num_negatives)
    skip_class = skips_class(cfg, relation, searcher, anchor_searcher, n_items)
    skip_groups = skips_groups(cfg, fn_filter, searcher, anchor_searcher, n_items)
    skipped = None
    if skip_groups is None and ctx.positives_share_source:
        skip_groups = skips_sources(cfg, ctx.sources, searcher, anchor_searcher, n_items)
        skipped = None if skip_groups is None else skip_groups[anchors] >= 0
        if skip_groups is None and anchor_searcher is not None:  # a rule's own search
            anchor_searcher, skipped = sources_skipped_by(cfg, ctx.sources, anchor_searcher,
                                                          anchors)
    k_rows = initial_k(cfg, relation, ctx.sources, offsets, n_items, fn_filter is not None,
                       skip_class, anchors, skipped)
    k0 = int(k_rows.max(initial=0))
    keep_flags = fn_filter is not None and cfg.fn_mode in ("keep", "attract")
    if rows_from is not None and vectors is not None:
        from dataclasses import replace

        ctx = replace(ctx, vectors=np.zeros((0, dim), np.float32))
    few = None
    if not cfg.hard:  # a class or source of all but a few rows: those few, not draws
        parts = (relation.group if relation.kind == "label" else
                 ctx.sources if relation.kind == "instance" else None)
        few = few_outside(parts, min(4 * hi, int(k_rows.min(initial=k0))))
    return MineBlocks(ctx, anchors, positives, pos_scores, ref, k0,
                      n_items if cfg.hard else 16 * n_items, hi, keep_flags, searcher,
                      anchor_searcher, rows_from, positives_there=vectors is None,
                      skip_class=skip_class,
                      skip_groups=skip_groups, k_rows=k_rows, few=few)


def skips_class(cfg: MineConfig, relation: Relation, searcher: Searcher | None,
                anchor_searcher: Searcher | None, n_items: int) -> bool:
    """Whether each anchor's search skips its class, under the label relation with hard
    negatives: the ``anchor_searcher`` of the ``label`` rule (it says so: ``skips_label``),
    or, with none, a ``searcher`` whose index skips rows exactly
    (``searcher.skips_exactly``: the exact searches), searched by ``searcher.outside``.
    The class's rows are all positives, so the table is that of a search that fetches
    them and drops them; otherwise (approximate or GPU indices) they are fetched."""
    if not (cfg.hard and relation.kind == "label" and relation.group is not None):
        return False
    if anchor_searcher is not None:
        return bool(getattr(anchor_searcher, "skips_label", False))
    return searcher is not None and bool(
        getattr(searcher, "skips_exactly", lambda n: False)(n_items))


def skips_groups(cfg: MineConfig, fn_filter: FnFilter | None, searcher: Searcher | None,
                 anchor_searcher: Searcher | None, n_items: int) -> np.ndarray | None:
    """The near-duplicate rule's big groups each anchor's search skips
    (:func:`pairkit.mine.group_skip.big_groups`), or None: with hard negatives and no
    ``anchor_searcher``, a ``searcher`` that skips rows exactly (``skips_exactly``) and a
    filter that flags and drops every row of the groups of the anchor and its positives
    (``fn_filter.flagged_groups``: the near-duplicate rule, flagged candidates
    eliminated). The table is that of a search that fetches those rows and drops them."""
    if not (cfg.hard and anchor_searcher is None and searcher is not None
            and getattr(searcher, "skips_exactly", lambda n: False)(n_items)):
        return None
    groups = getattr(fn_filter, "flagged_groups", lambda c: None)(cfg)
    if groups is None:
        return None
    from pairkit.mine.group_skip import big_groups

    return big_groups(groups)


def sources_skipped_by(cfg: MineConfig, sources: np.ndarray, anchor_searcher: Searcher,
                       anchors: np.ndarray) -> tuple[Searcher, np.ndarray | None]:
    """``(anchor searcher, skipped)``: under the instance relation, a rule's own search
    (the ``label`` or ``cluster`` rule's, :func:`pairkit.index.outside.outside_searcher`)
    that can also skip the anchor's own big source (``skipping_sources``: exact, IVF),
    made to, and which anchors it skips for (as :func:`skips_sources`); else the searcher
    as given and None (the big source's rows fetched and dropped)."""
    if not cfg.hard:
        return anchor_searcher, None
    from pairkit.mine.group_skip import big_groups

    codes = big_groups(sources)
    make = getattr(anchor_searcher, "skipping_sources", None)
    skipping = None if codes is None or make is None else make(codes)
    if skipping is None:
        return anchor_searcher, None
    return skipping, codes[anchors] >= 0


def skips_sources(cfg: MineConfig, sources: np.ndarray, searcher: Searcher | None,
                  anchor_searcher: Searcher | None, n_items: int) -> np.ndarray | None:
    """The big sources each anchor's search skips under the instance relation (whose
    positives are the other rows of the anchor's source: every row of it is excluded),
    as codes per row (:func:`pairkit.mine.group_skip.big_groups` of ``sources``: those of
    at least ``MIN_SKIPPED_GROUP`` rows), or None: with hard negatives, no
    ``anchor_searcher`` and a ``searcher`` that skips rows exactly (as
    :func:`skips_groups`). The anchors of a source of 10,000 views then search past none
    of them, for the same table."""
    if not (cfg.hard and anchor_searcher is None and searcher is not None
            and getattr(searcher, "skips_exactly", lambda n: False)(n_items)):
        return None
    from pairkit.mine.group_skip import big_groups

    return big_groups(sources)
