"""``pairkit mine`` from a store to a pair table and its stats: :func:`mine_store` (a
:class:`~pairkit.core.store.Store` in, table and stats dict out) and :func:`mine_to_files`
(the command's store-to-files step: a store folder in, a table file or stdout and a stats
file out)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pairkit.core.blocks_here import MapBlocks
from pairkit.errors import PairkitError, UsageError
from pairkit.index.options import IndexOptions, index_seed
from pairkit.mine.config import MineConfig
from pairkit.mine.skip import SkippedRows

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.fn_context import FnContext
    from pairkit.mine.positives import PositiveConfig


class MineExecutor(Protocol):
    """Where ``mine`` runs its blocks of anchors (:class:`pairkit.distributed.mine.RayMine`)."""

    def search_options(self, index: IndexOptions) -> IndexOptions:
        """``index`` as the executor can search with it."""
        ...

    def __call__(self, run: Callable[[Any], tuple[Any, dict[str, Any]]]
                 ) -> tuple[Any, dict[str, Any]]:
        """``run(map_blocks)`` with the executor's ``map_blocks``."""
        ...


def mine_to_files(
    store: Path, output: str, cfg: MineConfig, *, relation: str | None = None,
    fmt: str = "triplet", index: IndexOptions | None = None,
    fn_config: FalseNegativeConfig | None = None, positives: PositiveConfig | None = None,
    stats_path: str | Path | None = None, force: bool = False,
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    executor: MineExecutor | None = None,
    streamed: bool | None = None,
    partitions: int | None = None,
) -> dict[str, Any]:
    """Mine the store at ``store`` and write the table to ``output`` (``-``: JSON Lines
    on stdout) and the stats to ``stats_path``; returns the stats dict. Outputs are
    checked before any work and written atomically. ``executor``: where the blocks of
    anchors are mined (None: here; the command line picks
    :class:`pairkit.distributed.mine.RayMine` for ``--ray``), with the same result.

    Here, a run that can (:func:`pairkit.mine.parts_run.streams_parts`: a local parquet
    output, and no false-negative rules or mined positives, FAISS on the CPU, not
    ``hnsw``) is **streamed** from the store's shards block by block
    (:func:`pairkit.mine.parts_run.mine_parts`), with the same table and stats; with rules
    or mined positives the blocks still write the table part by part (the vectors held,
    not the table). ``streamed`` False keeps such a run in memory (the store's float32
    copy, the whole table), True or None (default) writes it by parts. ``partitions``:
    the IVF lists' partitions of such a run (:func:`pairkit.mine.parts_run.mine_parts`;
    None: one per worker with an executor)."""
    from pairkit.core.atomic import atomic_open, check_output
    from pairkit.core.paths import check_output_apart, is_within, same_file
    from pairkit.core.relations import parse_relation
    from pairkit.core.store import Store
    from pairkit.core.tables import check_table_output, table_kind, write_table
    from pairkit.mine.summary import no_negatives_error, unknown_pairs_warning

    index = IndexOptions() if index is None else index
    index.check_knobs()
    stats_out = None if stats_path is None else str(stats_path)  # "-": stdout
    if stats_out is not None and stats_out.endswith(("/", os.sep)):
        raise UsageError(f"--stats {stats_out} ends in /, but the stats are one JSON file "
                         "(stats.json)")
    if stats_out is not None and (stats_out == output == "-"
                                  or same_file(stats_out, output)):
        raise UsageError("--stats and -o must be different files")
    if stats_out not in (None, "-") and output != "-" and "://" not in stats_out + output:
        for inner, outer, a, b in ((stats_out, output, "--stats", "-o"),
                                   (output, stats_out, "-o", "--stats")):
            if is_within(inner, outer):  # written after the table, or into its folder
                raise UsageError(f"{a} {inner} is inside {b} {outer}: --stats and -o must "
                                 "be apart")
    # the store, and a pairs:FILE relation's table (None for the others: skipped)
    inputs = [store, None if relation is None else parse_relation(relation)[1]]
    check_output_apart(output, inputs)
    check_output_apart(stats_path, inputs, "--stats")
    table_kind(output)  # fail on a bad extension before any work
    if output != "-":
        check_table_output(output, force)
    if stats_out not in (None, "-"):
        check_output(stats_out, force, what="stats file")
    from pairkit.core.manifest import read_manifest
    from pairkit.mine.config import validate_config

    try:  # the manifest alone: no shard opened yet
        rows = int(read_manifest(store)["count"])
    except PairkitError:
        rows = 0  # the store's own open below says what is wrong with it
    if rows:  # -k (and the window) against the rows: bad usage, before any work
        validate_config(cfg, rows)
    from pairkit.mine.parts_run import mine_parts, streams_parts

    parts = streams_parts(output, fn_config, positives, executor, index)
    if executor is None and streamed is not None:
        parts = parts and streamed

    def run(map_blocks: Any = None) -> tuple[Any, dict[str, Any]]:
        if parts:  # the blocks write the table, committed here (streamed when local)
            stats = mine_parts(store, relation, cfg, index, fmt, output, force, map_blocks,
                               progress=progress, on_start=on_start, fn_config=fn_config,
                               positives=positives, partitions=partitions)
            if stats is not None:
                return None, stats
        st = Store.open(store, verify=True)
        return mine_store(st, relation, cfg, index, fn_config, fmt, progress=progress,
                          on_start=on_start, map_blocks=map_blocks, positives=positives)

    if executor is not None:
        index = executor.search_options(index)
        table, stats = executor(run)
    else:
        table, stats = run()
    if (empty := no_negatives_error(stats, cfg)) is not None:  # (parts: raised before)
        raise PairkitError(empty)
    warning = unknown_pairs_warning(stats)
    if warning and on_warning is not None:
        on_warning(warning)
    if table is not None:  # else committed by the blocks' parts already
        write_table(table, output, force=force, part_rows=anchor_parts(table, cfg.batch_size))
    if stats_out == "-":
        sys.stdout.write(json.dumps(stats, indent=2) + "\n")
    elif stats_out is not None:
        with atomic_open(stats_out, replace=force) as fh:
            json.dump(stats, fh, indent=2)
            fh.write("\n")
    return stats


def anchor_parts(table: Any, per_part: int) -> list[int]:
    """Row counts of the parts of a dataset output (``-o DIR/``): ``per_part`` anchors each
    (``--batch-size``), in table order (rows are grouped by anchor)."""
    ids = table["anchor_id"].to_numpy()
    if len(ids) == 0:
        return [0]
    first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])  # first row of each anchor
    starts = first[::max(1, per_part)]
    return np.diff(np.r_[starts, len(ids)]).astype(int).tolist()


def workers_rows(store: Any, map_blocks: Any, fn_config: FalseNegativeConfig | None) -> Any:
    """Where the workers read the store's vectors (:class:`pairkit.core.store_rows.StoreRows`)
    when the blocks run elsewhere (``map_blocks.workers_read_store``: a Ray cluster) and
    nothing else they get would carry the vectors anyway (no false-negative rules, whose
    context holds them); else None (shipped with the blocks)."""
    from pairkit.core.store_rows import StoreRows

    if not getattr(map_blocks, "workers_read_store", False) or fn_config is not None:
        return None
    return StoreRows.of(store)


def saved_index(store: Any, index: IndexOptions, where: Any) -> bool:
    """Whether ``pairkit index`` saved an index of this kind in the (local) store: then
    it is loaded here as before (its checks are the driver's to make)."""
    from pairkit.index.saved import index_paths

    if store.local_root is None or where.name == "torch":
        return False
    kinds = {"flat", "ivf"} if index.kind == "auto" else {index.kind}
    return any(index_paths(store.local_root, k)[0].exists() for k in kinds)


def mine_store(
    store: Any,
    relation: str | None,
    config: MineConfig,
    index: IndexOptions | None = None,
    fn_config: FalseNegativeConfig | None = None,
    fmt: str = "triplet",
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    map_blocks: MapBlocks | None = None,
    positives: PositiveConfig | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Mine a :class:`pairkit.core.store.Store`; returns ``(pair table, stats dict)``.

    ``relation``: ``instance``, ``label``, ``pairs:FILE`` or None (the store's
    default). ``fn_config``: a ``FalseNegativeConfig`` to flag false negatives
    among the candidates (None: no flags). ``on_start(n_anchors)`` is called
    once the anchors are known (for a progress bar). ``map_blocks``: where the
    blocks of anchors run (:func:`pairkit.mine.hard_negatives.mine_negatives`); the index
    and the false-negative context are built here once either way. ``positives``: mine
    positives beyond the anchor's views too (:mod:`pairkit.mine.positives`; rows with
    ``positive_kind = mined``), None or ``per_anchor = 0``: none.
    """
    import time

    from pairkit.core.pairs import FORMATS, build_pair_table
    from pairkit.core.relations import load_relation
    from pairkit.index.open import engine_for
    from pairkit.mine.config import validate_config
    from pairkit.mine.hard_negatives import mine_negatives
    from pairkit.mine.parts_run import relation_stats
    from pairkit.mine.stats import same_label_record, summary_stats

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
    index = replace(index or IndexOptions(), seed=index_seed(config.seed))
    where = engine_for(index)
    t_index = time.perf_counter()
    fn_filter = None
    skipped: SkippedRows | None = None  # what the search skips
    ctx = None
    if fn_config is not None:
        from pairkit.mine.rules_run import RuleFilter, rules_context

        ctx, skipped = rules_context(store, vectors, sources, fn_config, config, positives,
                                     index, where, shipped=map_blocks is not None)
        fn_filter = RuleFilter(ctx, fn_config)
    t_fn = time.perf_counter()
    searcher = anchor_searcher = None
    index_text = "none (easy negatives: uniform sample)"
    search_time = [0.0]
    rows_from = workers_rows(store, map_blocks, fn_config)
    if config.hard and skipped is None and rows_from is not None and not saved_index(
            store, index, where):
        from pairkit.index.open import planned_description
        from pairkit.mine.blocks import StoreSearcher

        # built by each worker from the store (the driver neither builds nor ships it)
        searcher = StoreSearcher(rows_from, replace(index, device=where.device,
                                                    backend=where.name))
        index_text = planned_description(len(vectors), vectors.shape[1], index, where,
                                         "built on each worker")
    elif config.hard:
        from pairkit.mine.rules_run import open_searchers

        searcher, anchor_searcher, index_text = open_searchers(store, vectors, index, where,
                                                               skipped, search_time)

    if on_start is not None:
        on_start(len(rel.anchors()))
    t1 = time.perf_counter()
    result = mine_negatives(vectors, sources, rel, config, searcher, fn_filter, progress,
                            anchor_searcher=anchor_searcher, map_blocks=map_blocks,
                            rows_from=rows_from)
    mine_positives = positives is not None and positives.per_anchor > 0
    if rows_from is not None and not mine_positives:
        # the workers read their own copy; the table and stats don't need it here: freed
        # before the table is built (the driver's peak)
        vectors = np.zeros((0, store.dim), np.float32)
        store.release_vectors()
    table = build_pair_table(result.pairs, fmt, store.content_id,
                             items["path"].to_numpy(dtype=object),
                             flag_columns=fn_config is not None and config.keep_flagged)
    mined_stats = None
    if mine_positives:
        from pairkit.mine.rules_run import mined_positives, with_mined_positives

        anchors = result.pairs.anchors
        mined, mined_stats = mined_positives(anchors, vectors, sources, store, positives, ctx,
                                             fn_config, index, where)
        table = with_mined_positives(table, fmt, anchors, mined, None, store.content_id,
                                     store.items["path"].to_numpy(dtype=object))
    stats = run_stats(
        store, rel.description, config, fmt, index_text, len(table),
        summary_stats(result, config.num_negatives, config.hard), fn_config, ctx, skipped,
        seconds={"setup": round(t1 - t0, 3), "mine": round(time.perf_counter() - t1, 3),
                 "false_negative_context": round(t_fn - t_index, 3),
                 "index": round(t1 - t_fn, 3), "search": round(search_time[0], 3)})
    if mined_stats is not None:
        stats["mined_positives"] = mined_stats
    if fn_config is not None:
        from pairkit.mine.fn_estimate import estimate_quality

        stats["fn_estimate"] = estimate_quality(ctx, fn_config, seed=config.seed)
    labels = store.labels()
    if labels is not None:
        stats.update(same_label_record(result.pairs, labels))
    stats.update(relation_stats(rel))
    return table, stats


def run_stats(store: Any, relation: str, config: MineConfig, fmt: str, index_text: str,
              rows: int, summary: dict[str, Any], fn_config: FalseNegativeConfig | None = None,
              ctx: FnContext | None = None, skipped: SkippedRows | None = None,
              seconds: dict[str, float] | None = None) -> dict[str, Any]:
    """The stats dict of a run: the store, the relation (its description) and options,
    ``rows`` of the table, the ``summary`` (:func:`pairkit.mine.stats.summary_stats`),
    the rules' context."""
    lo, hi = config.window()
    return {
        "store": str(store.root),
        "store_id": store.content_id,
        "items": int(store.count),
        "relation": relation,
        "hard": config.hard,
        "index": index_text,
        "format": fmt,
        "rows": int(rows),
        **summary,
        "window": [lo, hi] if config.hard else None,
        "sampling": config.sampling if config.hard else "uniform",
        "seed": config.seed,
        **rules_stats(config, fn_config, ctx, skipped),
        "seconds": seconds or {},
    }


def rules_stats(config: MineConfig, fn_config: FalseNegativeConfig | None,
                ctx: FnContext | None, skipped: SkippedRows | None) -> dict[str, Any]:
    """The keys of :func:`run_stats` that say what the false-negative rules did (the
    rules, the clusters chosen, the mutual-neighbour rule's guard, which rows the search
    skipped, the mode)."""
    from pairkit.mine.stats import cluster_stats

    return {
        "false_negative_rules": list(fn_config.rules) if fn_config is not None else [],
        "clusters": cluster_stats(ctx, fn_config) if fn_config is not None else None,
        # the mutual-neighbour rule's guard and its lists' depth when cut
        "mutual": dict(ctx.mutual_info) if ctx is not None and ctx.mutual_info else None,
        "cluster_rows_not_searched": skipped is not None and skipped.what == "cluster",
        "label_rows_not_searched": skipped is not None and skipped.what == "label",
        "fn_mode": config.fn_mode if fn_config is not None else None,
    }
