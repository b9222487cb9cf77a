"""The plan of a ``mine --ray`` run with false-negative rules or mined positives, made
where the store is read: a Ray task on the cluster, never the driver.

The task opens the store, builds the rules' context (the mutual-neighbour lists, the
cluster rule's consensus runs, the near-duplicate groups:
:func:`pairkit.mine.rules_run.rules_context`), the searchers and the mined positives
of every anchor by the calls a run here makes (:func:`pairkit.mine.command.mine_store`),
and plans the blocks with the vectors. The
plan (vectors, context, index) stays in Ray's object store, where the blocks' workers
take it (zero-copy on the task's node); the driver receives only the counts and the
stats of the rules (a few kB). The workers then write their blocks' parts, the mined
positives of their anchors with them, as on the path without rules
(:mod:`pairkit.mine.block_parts`), and the driver commits the parts
(:mod:`pairkit.mine.parts_run`): table and stats are the local run's (tests). When the
rules' whitened neighbour search is an IVF, the workers search it first, and assign the
cluster rule's cells, before this plan is made (:mod:`pairkit.mine.white_parts`): the
task merges their files instead of reading every row for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.index.options import IndexOptions

if TYPE_CHECKING:
    from pairkit.mine.block_parts import PartsJob
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.parts_run import PlanSpec
    from pairkit.mine.positives import PositiveConfig


@dataclass(frozen=True)
class RulesSpec:
    """The rules of a run planned by :func:`plan_with_rules`: the false-negative
    config (None: no rules), the mined positives' (None or ``per_anchor`` 0: none) and
    the index options of the run's searches (fitted to the workers)."""

    fn_config: FalseNegativeConfig | None
    positives: PositiveConfig | None
    index: IndexOptions
    # the plan goes to a cluster's workers: an IVF index of the store's float16 rows keeps
    # only their ids, and each worker reads a cell's rows from the store when it scans it
    shipped: bool = False

    @property
    def mines_positives(self) -> bool:
        return self.positives is not None and self.positives.per_anchor > 0


def has_rules(fn_config: Any, positives: Any) -> bool:
    """Whether a run has false-negative rules or mined positives (planned with the
    vectors: :func:`plan_with_rules`)."""
    return fn_config is not None or (positives is not None and positives.per_anchor > 0)


def plan_with_rules(st: Any, spec: PlanSpec, white: Any = None
                    ) -> tuple[PartsJob, dict[str, Any]]:
    """``(PartsJob, info)`` of the opened store ``st`` for ``spec`` (``spec.rules`` set):
    see the module docstring. ``info`` has what :func:`pairkit.mine.parts_run.plan_of`
    gives, plus the index text, the rules' stats (``rules``: keys of
    :func:`pairkit.mine.command.run_stats`; ``after``: the mined positives' and the
    label-free estimate's) and the seconds of the context and the index. ``white``: the
    whitened neighbour lists searched by the workers (:mod:`pairkit.mine.white_parts`),
    merged here instead of searched."""
    from pairkit.core.relations import load_relation
    from pairkit.index.open import engine_for
    from pairkit.mine.block_parts import PartsJob, PartsPlan
    from pairkit.mine.command import rules_stats
    from pairkit.mine.hard_negatives import plan_blocks
    from pairkit.mine.parts_run import relation_stats
    from pairkit.mine.rules_run import (
        RuleFilter,
        mined_positives,
        open_searchers,
        rules_context,
    )

    rules = spec.rules
    assert rules is not None
    config, fn_config = spec.config, rules.fn_config
    t0 = time.perf_counter()
    rel = load_relation(spec.relation, st.items)
    where = engine_for(rules.index)
    vectors = plan_vectors(st, rules.index, where, spec.rows_from, reread=rules.shipped)
    sources = st.source_codes()
    ctx = skipped = fn_filter = None
    if fn_config is not None:
        ctx, skipped = rules_context(st, vectors, sources, fn_config, config, rules.positives,
                                     rules.index, where, shipped=True, split=white)
        fn_filter = RuleFilter(ctx, fn_config)
    t_fn = time.perf_counter()
    searcher = anchor_searcher = None
    index_text = "none (easy negatives: uniform sample)"
    search_time = [0.0]
    if config.hard:
        searcher, anchor_searcher, index_text = open_searchers(st, vectors, rules.index, where,
                                                               skipped, search_time)
    t_index = time.perf_counter()
    # with the vectors (not rows_from): the rules' context holds them anyway, and the
    # positives are scored here once, as in a run here
    blocks = plan_blocks(vectors, sources, rel, config, searcher, fn_filter, anchor_searcher)
    blocks.rows_from = spec.rows_from  # the workers' paths and label codes (store_columns)
    mined = None
    after_stats: dict[str, Any] = {}
    if rules.mines_positives:
        mined, after_stats["mined_positives"] = mined_positives(
            blocks.anchors, vectors, sources, st, rules.positives, ctx, fn_config, rules.index,
            where, white)
    if fn_config is not None:
        from pairkit.mine.fn_estimate import estimate_quality

        after_stats["fn_estimate"] = estimate_quality(ctx, fn_config, seed=config.seed)
    if mined is not None:  # each block reads its own: none holds every anchor's
        from pairkit.mine.mined_parts import write_mined

        mined = write_mined(mined, spec.folder, len(blocks.anchors), config.batch_size,
                            spec.remote.token if spec.remote is not None else "")
    if ctx is not None:
        drop_plan_only(ctx, fn_config)
    from pairkit.core.heap import return_free_memory

    return_free_memory()  # the context's and the positives' temporaries, before the blocks
    labelled = st.has_labels
    flags = fn_config is not None and config.keep_flagged
    info = {"anchors": len(blocks.anchors), "k0": blocks.k0, "relation": rel.description,
            "relation_stats": relation_stats(rel), "labelled": labelled,
            "index": index_text, "rules": rules_stats(config, fn_config, ctx, skipped),
            "after": after_stats,
            # the search's seconds: added up by the blocks where they run in this process
            # (mine_parts here), not by a cluster's workers
            "search_time": search_time,
            "seconds": {"false_negative_context": round(t_fn - t0, 3),
                        "index": round(t_index - t_fn, 3)}}
    plan = PartsPlan(spec.folder, spec.fmt, st.content_id, labelled, flags=flags,
                     remote=spec.remote)
    return PartsJob(blocks, plan, mined=mined), info


def drop_plan_only(ctx: Any, fn_config: FalseNegativeConfig) -> None:
    """Forget what only the plan reads, once the cluster runs are assigned, the mined
    positives mined and the mutual-neighbour rule's source pairs made: the cluster
    rule's principal components of every row (computed when read,
    :func:`pairkit.mine.clusters.pca_rows`, so they hold no memory here, but a view of
    an array pickles with the array: kept, a Ray plan would ship the rows twice) and the
    whitened neighbour lists (ids and scores, 12 bytes a row and neighbour: 120 MB at 1M
    rows; the blocks read the rule's sorted source pairs, built from them here). The
    blocks flag and select from what is left, so the same table."""
    if ctx.spectral is not None and len(ctx.spectral.reduced):
        dims = ctx.spectral.reduced.shape[1]
        ctx.spectral = replace(ctx.spectral, reduced=np.zeros((0, dims), np.float32),
                               cells={})  # and any extension cells still kept
    if ctx.whitened_neighbours is not None:
        from pairkit.mine.rules.mutual import NAME, mutual_source_keys

        if NAME in fn_config.rules:
            mutual_source_keys(ctx)  # what the rule's blocks read (made from the lists)
        ctx.whitened_neighbours = None


def plan_vectors(st: Any, index: IndexOptions, where: Any, rows_from: Any = None,
                 reread: bool = False) -> Any:
    """The store's rows as the plan holds them: for a float16 store searched by an IVF
    index on the CPU (what a store above the exact-search limit gets), its float16 rows
    read as float32 when used (a :class:`~pairkit.core.row_view.RowView`; float16 to
    float32 is exact, so the same table: tests/mine/test_streamed.py): read in place from
    the store's shards when the blocks stream them (``rows_from`` streamed: here, or a
    cluster's workers, each reading the store itself: no copy at all, the pages handed
    back after each read), else a float16 copy (half of a float32 one, 0.25 GB at 1M x
    128); in
    every other case the float32 copy (an exact search multiplies all rows at once; the
    GPU and torch searches take an array). ``reread`` (a plan shipped to a cluster's
    workers, whose blocks stream): the rows read in place are marked ``recompute``, so
    that an IVF index of them keeps their ids and reads a cell's rows again when it scans
    it (:class:`pairkit.index.half_ivf.CellRows`): the plan holds no copy of the store's
    rows, the workers read them from the store (measured: the plan of 200,000 x 128 rows
    75 MB -> 24 MB, its blocks' search about 30% slower; docs/benchmarks.md)."""
    from pairkit.core.row_view import RowView

    if (np.dtype(st.dtype) != np.float16 or index.cpu_kind(st.count) != "ivf"
            or index.float16 or where.name != "faiss" or where.gpu):
        return st.vectors(np.float32)
    if rows_from is not None and rows_from.streamed:
        view = RowView(rows_from, rows=st.rows(), dim=st.dim)
        view.recompute = reread
        return view
    return RowView(st.vectors(np.float16))
