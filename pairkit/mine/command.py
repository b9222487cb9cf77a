"""``pairkit mine`` from a store to a pair table and its stats: :func:`mine_store` (a
:class:`~pairkit.core.store.Store` in, table and stats dict out) and :func:`mine_to_files`
(the command's store-to-files step: a store folder in, a table file or stdout and a stats
file out)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pairkit.errors import PairkitError, UsageError
from pairkit.index.options import IndexOptions
from pairkit.mine.blocks import MapBlocks, Searcher
from pairkit.mine.config import MineConfig
from pairkit.mine.skip import SkippedRows, skippable_rows

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
    stats_path: Path | None = None, force: bool = False,
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    executor: MineExecutor | None = None,
    streamed: bool | None = None,
) -> dict[str, Any]:
    """Mine the store at ``store`` and write the table to ``output`` (``-``: JSON Lines
    on stdout) and the stats to ``stats_path``; returns the stats dict. Outputs are
    checked before any work and written atomically. ``executor``: where the blocks of
    anchors are mined (None: here; the command line picks
    :class:`pairkit.distributed.mine.RayMine` for ``--ray``), with the same result.

    Here, a run that can (:func:`pairkit.mine.parts_run.streams_parts`: a local parquet
    output, no false-negative rules or mined positives, FAISS on the CPU, not ``hnsw``)
    is **streamed** from the store's shards block by block
    (:func:`pairkit.mine.parts_run.mine_parts`), with the same table and stats;
    ``streamed`` False keeps such a run in memory (the store's float32 copy, the whole
    table), True or None (default) streams it."""
    from pairkit.core.atomic import atomic_open, check_output
    from pairkit.core.paths import check_output_apart
    from pairkit.core.store import Store
    from pairkit.core.tables import check_table_output, table_kind, write_table
    from pairkit.mine.summary import unknown_pairs_warning

    index = IndexOptions() if index is None else index
    if stats_path is not None and str(stats_path) == output:
        raise UsageError("--stats and -o must be different files")
    check_output_apart(output, [store])
    check_output_apart(stats_path, [store], "--stats")
    table_kind(output)  # fail on a bad extension before any work
    if output != "-":
        check_table_output(output, force)
    if stats_path is not None:
        check_output(stats_path, force, what="stats file")
    from pairkit.mine.parts_run import mine_parts, streams_parts

    parts = streams_parts(output, fn_config, positives, executor, index)
    if executor is None and streamed is not None:
        parts = parts and streamed

    def run(map_blocks: Any = None) -> tuple[Any, dict[str, Any]]:
        if parts:  # the blocks write the table, committed here (streamed when local)
            stats = mine_parts(store, relation, cfg, index, fmt, output, force, map_blocks,
                               progress=progress, on_start=on_start)
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
    warning = unknown_pairs_warning(stats)
    if warning and on_warning is not None:
        on_warning(warning)
    if table is not None:  # else committed by the blocks' parts already
        write_table(table, output, force=force, part_rows=anchor_parts(table, cfg.batch_size))
    if stats_path is not None:
        with atomic_open(stats_path, replace=force) as fh:
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
    """Where the workers read the store's vectors (:class:`pairkit.mine.blocks.StoreRows`)
    when the blocks run elsewhere (``map_blocks.workers_read_store``: a Ray cluster) and
    nothing else they get would carry the vectors anyway (no false-negative rules, whose
    context holds them); else None (shipped with the blocks)."""
    from pairkit.mine.blocks import StoreRows

    if not getattr(map_blocks, "workers_read_store", False) or fn_config is not None:
        return None
    root = store.local_root
    where = str(Path(root).resolve()) if root is not None else str(store.root)
    return StoreRows(where, store.content_id)


def saved_index(store: Any, index: IndexOptions, where: Any) -> bool:
    """Whether ``pairkit index`` saved an index of this kind in the (local) store: then
    it is loaded here as before (its checks are the driver's to make)."""
    from pairkit.index.saved import index_paths

    if store.local_root is None or where.name == "torch":
        return False
    kinds = {"flat", "ivf"} if index.kind == "auto" else {index.kind}
    return any(index_paths(store.local_root, k)[0].exists() for k in kinds)


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
    from pairkit.mine.stats import same_label_share, summary_stats

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
    index = replace(index or IndexOptions(), seed=config.seed)
    where = engine_for(index)
    t_index = time.perf_counter()
    fn_filter = None
    skipped: SkippedRows | None = None  # what the search skips
    ctx = None
    if fn_config is not None:
        from pairkit.mine import false_negatives as fnm

        sha = items["file_sha256"].to_numpy(dtype=object, na_value=None)
        white = None
        if "mutual-neighbour" in fn_config.rules:  # searched here with mine's index options
            white = positive_neighbour_lists(None, vectors, sources,
                                             _rule_lists_config(positives), index, where)
        ctx = fnm.build_context(vectors, store.labels(), sources, fn_config, seed=config.seed,
                                file_sha256=sha if any(v is not None for v in sha) else None,
                                views=items["view"].to_numpy(), backend=where,
                                paths=items["path"].to_numpy(dtype=object),
                                image_root=store.manifest.get("image_root"),
                                whitened_neighbours=white)
        skipped = skippable_rows(ctx, fn_config, config)
        if skipped is not None and ctx.groups is None:
            # a near-duplicate of the anchor (or of its positive) shares its clusters, so
            # the search never offers it; the rare one across a border is caught by
            # comparing each offered candidate with the threshold, without the store-wide
            # range search that grouping needs
            ctx.pairwise_near_duplicates = True

        if map_blocks is not None and "near-duplicate" in fn_config.rules:
            # computed on first use otherwise: here once, not once per worker
            from pairkit.mine.fn_context import near_duplicate_group_ids

            near_duplicate_group_ids(ctx, fn_config)

        def fn_filter(a: np.ndarray, c: np.ndarray, s: np.ndarray, r: np.ndarray,
                      pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return fnm.flag_false_negatives(ctx, a, c, s, r, fn_config, positives=pos)

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
    elif config.hard and skipped is None:
        from pairkit.index.open import open_searcher

        opened = open_searcher(vectors, index, store_root=store.local_root,
                               content_id=store.content_id, engine=where)
        searcher = _timed(opened.search, search_time)
        index_text = opened.describe()
    elif config.hard:
        from pairkit.index.outside import outside_searcher

        anchor_searcher, index_text = outside_searcher(
            vectors, skipped.parts, index, where, store_root=store.local_root,
            content_id=store.content_id, votes=skipped.votes, what=skipped.what)

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
        table, mined_stats = _with_mined_positives(table, fmt, result.pairs.anchors, vectors,
                                                   sources, store, positives, ctx, fn_config,
                                                   index, where)
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
        stats["negatives_same_label"] = same_label_share(result.pairs, labels)
    stats.update(relation_stats(rel))
    return table, stats


def run_stats(store: Any, relation: str, config: MineConfig, fmt: str, index_text: str,
              rows: int, summary: dict[str, Any], fn_config: FalseNegativeConfig | None = None,
              ctx: FnContext | None = None, skipped: SkippedRows | None = None,
              seconds: dict[str, float] | None = None) -> dict[str, Any]:
    """The stats dict of a run: the store, the relation (its description) and options,
    ``rows`` of the table, the ``summary`` (:func:`pairkit.mine.stats.summary_stats`),
    the rules' context."""
    from pairkit.mine.stats import cluster_stats

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
        "false_negative_rules": list(fn_config.rules) if fn_config is not None else [],
        "clusters": cluster_stats(ctx, fn_config) if fn_config is not None else None,
        "cluster_rows_not_searched": skipped is not None and skipped.what == "cluster",
        "label_rows_not_searched": skipped is not None and skipped.what == "label",
        "fn_mode": config.fn_mode if fn_config is not None else None,
        "seconds": seconds or {},
    }


def _with_mined_positives(table: Any, fmt: str, anchors: np.ndarray, vectors: np.ndarray,
                          sources: np.ndarray, store: Any, cfg: PositiveConfig,
                          ctx: FnContext | None, fn_config: FalseNegativeConfig | None,
                          index: IndexOptions, backend: Any) -> tuple[Any, dict[str, Any]]:
    """``table`` with the mined positives of ``anchors`` as extra rows, and their stats.

    The near-duplicate groups and cluster runs are the false-negative context's when it
    has them (computed once for both); every row's neighbour list comes from searches with
    mine's index options (exact up to ``--exact-max-rows``, approximate above) in the
    partially whitened space, or by plain cosine with ``whitening`` 0."""
    from pairkit.core.pairs import add_mined_positives
    from pairkit.core.unique import sorted_unique
    from pairkit.mine.fn_context import near_duplicate_threshold
    from pairkit.mine.positives import mine_positives

    if cfg.whitening > 0:
        nb_ids, nb_scores = positive_neighbour_lists(ctx, vectors, sources, cfg, index, backend)
    else:
        nb_ids, nb_scores = _cosine_neighbour_lists(vectors, sources, store, cfg, ctx, index,
                                                    backend)
    threshold = None
    if fn_config is not None and "near-duplicate" in fn_config.rules:
        threshold = near_duplicate_threshold(fn_config)
    mined = mine_positives(anchors, nb_ids, nb_scores, cfg,
                           groups=None if ctx is None else ctx.groups, vectors=vectors,
                           cluster_assign=None if ctx is None else ctx.cluster_assign,
                           near_duplicate_threshold=threshold)
    out = add_mined_positives(table, fmt, anchors, mined.rows, mined.ids, mined.scores,
                              mined.confidence, mined.reasons, store.content_id,
                              store.items["path"].to_numpy(dtype=object))
    reasons, counts = np.unique(mined.reasons.astype(str), return_counts=True)
    stats: dict[str, Any] = {
        "rows": len(mined), "anchors_with_any": int(len(sorted_unique(mined.rows))),
        "per_anchor": round(len(mined) / max(len(anchors), 1), 3),
        "reasons": {str(r): int(c) for r, c in zip(reasons, counts, strict=True)},
        "neighbours": cfg.neighbours, "max_per_anchor": cfg.per_anchor,
    }
    labels = store.labels()
    if labels is not None and len(mined):
        a = np.asarray(labels, dtype=object)[np.asarray(anchors)[mined.rows]]
        b = np.asarray(labels, dtype=object)[mined.ids]
        known = np.array([x is not None and y is not None for x, y in zip(a, b, strict=True)])
        if known.any():
            stats["same_label"] = round(float((a[known] == b[known]).mean()), 4)
    return out, stats


def _rule_lists_config(positives: PositiveConfig | None) -> PositiveConfig:
    """The depth and whitening of the mutual-neighbour rule's lists: the mined positives'
    (so an anchor's mined positive is never its negative), the default whitening when
    they are off or mined by plain cosine."""
    from pairkit.mine.positives import PositiveConfig
    from pairkit.mine.whitening import DEFAULT_POWER

    cfg = positives if positives is not None else PositiveConfig()
    return cfg if cfg.whitening > 0 else replace(cfg, whitening=DEFAULT_POWER)


def positive_neighbour_lists(ctx: FnContext | None, vectors: np.ndarray, sources: np.ndarray,
                             cfg: PositiveConfig, index: IndexOptions, backend: Any
                             ) -> tuple[np.ndarray, np.ndarray]:
    """The whitened mutual-neighbour lists (:func:`pairkit.mine.whitening.whitened_neighbours`)
    searched with mine's index options; kept on ``ctx`` (the ``mutual-neighbour`` rule
    and the mined positives share them)."""
    from pairkit.mine.whitening import whitened_neighbours

    if ctx is not None and ctx.whitened_neighbours is not None and (
            ctx.whitened_neighbours[0].shape[1] >= cfg.neighbours):
        ids, scores = ctx.whitened_neighbours
        return ids[:, :cfg.neighbours], scores[:, :cfg.neighbours]

    def search(space: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return _neighbour_lists(space, sources, k, index, backend, None)

    lists = whitened_neighbours(vectors, cfg.neighbours, search, power=cfg.whitening,
                                seed=index.seed)
    if ctx is not None:
        ctx.whitened_neighbours = lists
    return lists


def _cosine_neighbour_lists(vectors: np.ndarray, sources: np.ndarray, store: Any,
                            cfg: PositiveConfig, ctx: FnContext | None, index: IndexOptions,
                            backend: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every row's ``cfg.neighbours`` nearest rows of other sources by plain cosine, best
    first: the context's kNN graph when it is deep enough, else candidates from the
    cluster rule's principal components, else one search with mine's index options."""
    from pairkit.index.search import exact_scores

    given = ctx.neighbours if ctx is not None else None
    if given is not None and given[0].shape[1] >= cfg.neighbours:
        return given
    if ctx is not None and ctx.spectral is not None:
        # the cluster rule's principal components of every row: a search in 128 dims
        # instead of d, twice as deep, re-scored exactly and cut back to the best (98% of
        # the exact lists' mutual pairs on fm0; the lists only choose who is compared)
        nb_ids, _ = _neighbour_lists(ctx.spectral.reduced, sources, 2 * cfg.neighbours,
                                     index, backend, None)
        nb_scores = exact_scores(vectors, vectors, nb_ids)
        order = np.argsort(-nb_scores, axis=1, kind="stable")[:, :cfg.neighbours]
        return (np.take_along_axis(nb_ids, order, axis=1),
                np.take_along_axis(nb_scores, order, axis=1))
    return _neighbour_lists(vectors, sources, cfg.neighbours, index, backend, store)


def _neighbour_lists(vectors: np.ndarray, sources: np.ndarray, m: int, index: IndexOptions,
                     backend: Any, store: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every row's ``m`` nearest rows of other sources ``(ids, scores)`` (N, m), best first,
    -1 padded, through the index mine's options pick (``store``: a saved index of its
    rows is reused; None for other vectors), by the one search entry point."""
    from pairkit.index.open import open_searcher
    from pairkit.mine.clusters import other_sources

    n = len(vectors)
    views = int(np.bincount(sources).max()) if n else 1
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    opened = open_searcher(vectors, index,
                           store_root=None if store is None else store.local_root,
                           content_id=None if store is None else store.content_id,
                           engine=backend)
    scores, ids = opened.search(vectors, min(n, m + views))
    return other_sources(scores, ids, sources, m)
