"""The false-negative rules and mined positives of a ``mine`` run: the rules' context
and what the search may skip (:func:`rules_context`), the searchers
(:func:`open_searchers`), the mined positives (:func:`mined_positives`) and their rows
(:func:`with_mined_positives`). The same calls for a run here
(:func:`pairkit.mine.command.mine_store`) and for the plan a Ray task makes of a run on a
cluster (:mod:`pairkit.mine.rules_plan`), so the tables are the same."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.index.options import IndexOptions
from pairkit.mine.config import MineConfig
from pairkit.mine.skip import skippable_rows

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.fn_context import FnContext
    from pairkit.mine.positives import MinedPositives, PositiveConfig
    from pairkit.mine.skip import SkippedRows


@dataclass
class RuleFilter:
    """The blocks' false-negative filter: ``config``'s rules over ``ctx``
    (:func:`pairkit.mine.false_negatives.flag_false_negatives`); pickled with its context
    (a Ray worker gets both)."""

    ctx: FnContext
    config: FalseNegativeConfig

    def __call__(self, anchors: np.ndarray, cand: np.ndarray, scores: np.ndarray,
                 ref: np.ndarray, positives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from pairkit.mine.false_negatives import flag_false_negatives

        return flag_false_negatives(self.ctx, anchors, cand, scores, ref, self.config,
                                    positives=positives)

    def flagged_groups(self, cfg: MineConfig) -> np.ndarray | None:
        """The near-duplicate group of every row ((N,) int64, -1 none) when this filter
        flags every candidate in the group of the anchor or of one of its positives and
        ``cfg`` drops it (the ``near-duplicate`` rule with store-wide groups; hard
        negatives, flagged candidates eliminated), so a search may skip those rows
        (:func:`pairkit.mine.hard_negatives.skips_groups`); else None."""
        from pairkit.mine.fn_context import near_duplicate_group_ids

        if not (cfg.hard and cfg.fn_mode == "eliminate" and not cfg.keep_flagged
                and "near-duplicate" in self.config.rules):
            return None
        return near_duplicate_group_ids(self.ctx, self.config)


def rules_context(store: Any, vectors: np.ndarray, sources: np.ndarray,
                  fn_config: FalseNegativeConfig, config: MineConfig,
                  positives: PositiveConfig | None, index: IndexOptions, where: Any,
                  shipped: bool, split: Any = None) -> tuple[FnContext, SkippedRows | None]:
    """The rules' context of the store ``store`` (its float32 ``vectors`` and source
    codes given) and the rows the search may skip (None: search everything). ``shipped``:
    the blocks run elsewhere (the near-duplicate groups are computed here once, not once
    per worker). ``split``: the whitened lists searched by partition
    (:class:`pairkit.mine.white_parts.WhiteLists`), merged here, with the cluster rule's
    sample and its rows' cells when it made them."""
    from pairkit.errors import UsageError
    from pairkit.mine import false_negatives as fnm

    if set(fn_config.rules) <= {"label"} and not store.has_labels:
        raise UsageError(f"--fn-rules label: store {store.root} has no labels, so the rule "
                         "would flag nothing (embed with --labels, or choose label-free "
                         "rules: near-duplicate,mutual-neighbour,cluster)")
    items = store.items
    sha = items["file_sha256"].to_numpy(dtype=object, na_value=None)
    from pairkit.mine.positives import capped_neighbours

    white, principal, lists_cfg = None, None, rule_lists_config(positives)
    used = capped_neighbours(lists_cfg, sources)
    if "mutual-neighbour" in fn_config.rules:  # searched here with mine's index options
        from pairkit.mine.whitening import fit_whitening

        # fitted once: the lists' whitening, and the principal components the cluster
        # rule's graph starts from (pairkit.mine.view_whitening)
        principal = (split.space.white if split is not None
                     else fit_whitening(vectors, power=used.whitening, seed=index.seed))
        white = positive_neighbour_lists(None, vectors, sources, used, index, where, split,
                                         white=principal)
    from pairkit.encode.item_images import image_column_of

    image_root = store.manifest.get("image_root")
    spectral = None
    if split is not None:  # the cluster rule's sample, its rows' cells found by the workers
        from pairkit.mine.white_parts import spectral_of

        spectral = spectral_of(split, vectors)
    ctx = fnm.build_context(vectors, store.labels(), sources, fn_config, seed=config.seed,
                            file_sha256=sha if any(v is not None for v in sha) else None,
                            views=items["view"].to_numpy(), backend=where,
                            # for the pixel check only: without images, no Python string
                            # per row kept (and shipped to the workers with the context)
                            paths=items["path"].to_numpy(dtype=object) if image_root else None,
                            image_root=image_root, image_column=image_column_of(store),
                            whitened_neighbours=white, principal=principal,
                            spectral=spectral, dtype=store.dtype)
    if "mutual-neighbour" in fn_config.rules and used.neighbours < lists_cfg.neighbours:
        ctx.mutual_info["neighbours"] = {"asked": lists_cfg.neighbours,
                                         "used": used.neighbours}
    skipped = skippable_rows(ctx, fn_config, config)
    if skipped is not None and ctx.groups is None:
        # a near-duplicate of the anchor (or of its positive) shares its clusters, so
        # the search never offers it; the rare one across a border is caught by
        # comparing each offered candidate with the threshold, without the store-wide
        # range search that grouping needs
        ctx.pairwise_near_duplicates = True
    if shipped and "near-duplicate" in fn_config.rules:
        # computed on first use otherwise: here once, not once per worker
        from pairkit.mine.fn_context import near_duplicate_group_ids

        near_duplicate_group_ids(ctx, fn_config)
    return ctx, skipped


@dataclass
class TimedSearch:
    """``searcher`` that adds its seconds to ``total[0]`` (the summary's search time); a
    class, so that it pickles. ``skipping``: the same index's search that skips rows by
    part (:meth:`pairkit.index.open.Searcher.search_outside`; None: it can't)."""

    searcher: Any
    total: list[float]
    skipping: Any = None

    def __call__(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import time

        t = time.perf_counter()
        try:
            return self.searcher(queries, k)  # type: ignore[no-any-return]
        finally:
            self.total[0] += time.perf_counter() - t

    def skips_exactly(self, n_items: int) -> bool:
        """Whether :meth:`outside` can be called (see ``skipping``)."""
        return self.skipping is not None

    def outside(self, queries: np.ndarray, k: int, own: np.ndarray, parts: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """The search of ``queries`` among the rows whose ``parts`` differ from ``own``."""
        import time

        t = time.perf_counter()
        try:
            return self.skipping(queries, k, own, parts)  # type: ignore[no-any-return]
        finally:
            self.total[0] += time.perf_counter() - t

    def seconds(self) -> dict[str, float]:
        """Seconds spent searching, in this process (the index was built by the plan)."""
        return {"search": self.total[0]}


def open_searchers(store: Any, vectors: np.ndarray, index: IndexOptions, where: Any,
                   skipped: SkippedRows | None, search_time: list[float]
                   ) -> tuple[Any, Any, str]:
    """``(searcher, anchor_searcher, index text)`` of a hard run over ``vectors`` (the
    store's): one index of every row, or, when the search skips rows
    (``skipped``), the searcher of the rows outside each anchor's clusters (or label)."""
    if skipped is None:
        from pairkit.index.open import open_searcher

        opened = open_searcher(index_rows(store, vectors), index,
                               store_root=store.local_root, content_id=store.content_id,
                               engine=where)
        return (TimedSearch(opened.search, search_time,
                            opened.search_outside if opened.excludes else None),
                None, opened.describe())
    from pairkit.index.outside import outside_searcher

    anchor_searcher, text = outside_searcher(
        vectors, skipped.parts, index, where, store_root=store.local_root,
        content_id=store.content_id, votes=skipped.votes, what=skipped.what,
        rows=index_rows(store, vectors, arrays_too=True), coords=skipped.coords,
        threshold=skipped.threshold)
    if skipped.what == "label":
        anchor_searcher = LabelSkipped(anchor_searcher)
    return None, anchor_searcher, text


@dataclass
class LabelSkipped:
    """An anchor searcher that skips the rows of the anchor's label (the ``label`` rule's
    search): it says so (``skips_label``), so that the blocks of the label relation don't
    fetch room for the anchor's class (:func:`pairkit.mine.hard_negatives.skips_class`)."""

    search: Any
    skips_label: bool = True

    def __call__(self, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.search(rows, k)  # type: ignore[no-any-return]

    def skipping_sources(self, codes: np.ndarray) -> LabelSkipped | None:
        """This search, also skipping the rows of the anchor's own big source ``codes``
        (:meth:`pairkit.index.outside.AnchorSearch.skipping_sources`), or None."""
        inner = getattr(self.search, "skipping_sources", lambda c: None)(codes)
        return None if inner is None else LabelSkipped(inner, self.skips_label)


def index_rows(store: Any, vectors: Any, arrays_too: bool = False) -> Any:
    """The rows a plan's index is built from: the view itself when it is marked
    ``recompute`` (a plan shipped to a cluster: the index keeps their ids and reads a
    cell's rows when it scans it, :func:`pairkit.mine.rules_plan.plan_vectors`); else
    the store's rows in place (an IVF index keeps them as stored: float16 lists) for the
    plan's rows read when used (a view), and with ``arrays_too`` for an array as well
    (the masked search's IVF); else ``vectors``."""
    from pairkit.core.row_view import is_view

    if getattr(vectors, "recompute", False):
        return vectors
    return store.rows() if arrays_too or is_view(vectors) else vectors


def mined_positives(anchors: np.ndarray, vectors: np.ndarray, sources: np.ndarray,
                    store: Any, cfg: PositiveConfig, ctx: FnContext | None,
                    fn_config: FalseNegativeConfig | None, index: IndexOptions,
                    backend: Any, split: Any = None) -> tuple[MinedPositives, dict[str, Any]]:
    """The mined positives of ``anchors`` and their stats.

    The near-duplicate groups and cluster runs are the false-negative context's when it
    has them (computed once for both); every row's neighbour list comes from searches with
    mine's index options (exact up to ``--exact-max-rows``, approximate above) in the
    partially whitened space (searched by partition: ``split``,
    :func:`positive_neighbour_lists`), or by plain cosine with ``whitening`` 0."""
    from pairkit.core.unique import sorted_unique
    from pairkit.mine.fn_context import near_duplicate_threshold
    from pairkit.mine.positives import REASONS, capped_neighbours, mine_positives
    from pairkit.mine.rules import mutual

    cfg = capped_neighbours(cfg, sources)
    if cfg.whitening > 0:
        nb_ids, nb_scores = positive_neighbour_lists(ctx, vectors, sources, cfg, index, backend,
                                                     split)
    else:
        nb_ids, nb_scores = _cosine_neighbour_lists(vectors, sources, store, cfg, ctx, index,
                                                    backend)
    threshold = None
    if fn_config is not None and "near-duplicate" in fn_config.rules:
        threshold = near_duplicate_threshold(fn_config, store.dtype)
    # the cluster rule's runs give the confidence only where its guard left them on (off,
    # or cut_off: the runs found no class structure, their agreement says nothing; by
    # rank instead)
    runs = (None if ctx is None or {"off", "cut_off"} & ctx.cluster_info.keys()
            else ctx.cluster_assign)
    mined = mine_positives(anchors, nb_ids, nb_scores, cfg,
                           groups=None if ctx is None else ctx.groups, vectors=vectors,
                           cluster_assign=runs, near_duplicate_threshold=threshold,
                           sources=sources)
    if ctx is not None and fn_config is not None and mutual.NAME in fn_config.rules:
        by_rule = mined.codes != REASONS.index(mutual.REASON)
        if not mutual.is_off(ctx):
            # the rule flags from its own lists (whitened: P 0.25 when these are plain
            # cosine): a mutual neighbour it does not flag may be a negative of the anchor,
            # so it is not a positive too (with the same lists, every one is flagged)
            by_rule |= mutual.flags_pairs(ctx, np.asarray(anchors)[mined.rows], mined.ids)
        mined = mined.subset(by_rule)  # guard off: no mutual neighbour is a positive
    # equal labels, equal codes; -1: missing (no Python objects per mined pair)
    codes = store.label_codes()
    dropped = 0
    if (codes is not None and len(mined) and fn_config is not None and fn_config.trust_labels
            and "label" in fn_config.rules):
        # trusted labels decide a labelled pair (the similarity rules skip it): a mutual
        # neighbour of another label is a negative, so not a positive too
        a, b = codes[np.asarray(anchors)[mined.rows]], codes[mined.ids]
        agree = (a < 0) | (b < 0) | (a == b)
        dropped = int(len(mined) - agree.sum())
        mined = mined.subset(agree)
    stats: dict[str, Any] = {
        "rows": len(mined), "anchors_with_any": int(len(sorted_unique(mined.rows))),
        "per_anchor": round(len(mined) / max(len(anchors), 1), 3),
        "reasons": dict(sorted(mined.counts().items())),
        "neighbours": cfg.neighbours, "max_per_anchor": cfg.per_anchor,
    }
    if dropped:
        stats["dropped_other_label"] = dropped
    if codes is not None and len(mined):
        from pairkit.mine.stats import label_share, pair_label_counts

        same, both = pair_label_counts(codes[np.asarray(anchors)[mined.rows]],
                                       codes[mined.ids])
        if both:  # the share is over the rows with both labels known
            stats["same_label"], stats["labelled"] = label_share(same, both), both
    return mined, stats


def with_mined_positives(table: Any, fmt: str, anchors: np.ndarray, mined: MinedPositives,
                         span: tuple[int, int] | None, store_id: str, paths: Any) -> Any:
    """``table`` (the rows of ``anchors``, or of ``anchors[span[0]:span[1]]``: one block's)
    with the mined positives of those anchors as extra rows
    (:func:`pairkit.core.pairs.add_mined_positives`); ``paths`` the store's (an object
    array or a :class:`pairkit.core.pairs.StringColumn`)."""
    from pairkit.core.pairs import add_mined_positives
    from pairkit.mine.positives import reason_names

    rows, ids, scores, conf, codes = (mined.rows, mined.ids, mined.scores,
                                      mined.confidence, mined.codes)
    if span is not None:  # mined.rows are sorted: the block's are one slice
        lo, hi = np.searchsorted(rows, span)
        rows, ids, scores, conf, codes = (rows[lo:hi] - span[0], ids[lo:hi], scores[lo:hi],
                                          conf[lo:hi], codes[lo:hi])
        anchors = anchors[span[0]:span[1]]
    return add_mined_positives(table, fmt, anchors, rows, ids, scores, conf,
                               reason_names(codes), store_id, paths)


def rule_lists_config(positives: PositiveConfig | None) -> PositiveConfig:
    """The depth and whitening of the mutual-neighbour rule's lists: the mined positives'
    (so an anchor's mined positive is never its negative), the default whitening when
    they are off or mined by plain cosine."""
    from pairkit.mine.positives import PositiveConfig
    from pairkit.mine.whitening import DEFAULT_POWER

    cfg = positives if positives is not None else PositiveConfig()
    return cfg if cfg.whitening > 0 else replace(cfg, whitening=DEFAULT_POWER)


def positive_neighbour_lists(ctx: FnContext | None, vectors: np.ndarray, sources: np.ndarray,
                             cfg: PositiveConfig, index: IndexOptions, backend: Any,
                             split: Any = None, white: Any = None
                             ) -> tuple[np.ndarray, np.ndarray]:
    """The whitened mutual-neighbour lists (:func:`pairkit.mine.whitening.whitened_neighbours`)
    searched with mine's index options; kept on ``ctx`` (the ``mutual-neighbour`` rule
    and the mined positives share them). ``split``: searched by partition on a
    cluster's workers (:class:`pairkit.mine.white_parts.WhiteLists`, planned for ``cfg``):
    merged from their files, the same lists. ``white``: the whitening, when fitted
    already (:func:`pairkit.mine.whitening.fit_whitening` with ``cfg.whitening`` and
    ``index.seed``)."""
    from pairkit.mine.whitening import whitened_neighbours

    if ctx is not None and ctx.whitened_neighbours is not None and (
            ctx.whitened_neighbours[0].shape[1] >= cfg.neighbours):
        ids, scores = ctx.whitened_neighbours
        return ids[:, :cfg.neighbours], scores[:, :cfg.neighbours]

    def search_here(space: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        return search_neighbour_lists(space, sources, k, index, backend, None)

    search: Any = search_here
    if split is not None:
        from pairkit.mine.white_parts import SplitWhiteSearch

        search, white = SplitWhiteSearch(split, sources), split.space.white
    lists = whitened_neighbours(vectors, cfg.neighbours, search, power=cfg.whitening,
                                seed=index.seed, on_demand=True, white=white)
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
        # every row's 128 principal components (those of the cluster rule's fit): a search
        # in 128 dims instead of d, twice as deep, re-scored exactly and cut back to the
        # best (98% of the exact lists' mutual pairs on fm0; the lists only choose who is
        # compared). Not the rule's graph space: that one is whitened by the views'
        # differences (pairkit.mine.view_whitening), no proxy for plain cosines
        from pairkit.mine.clusters import pca_rows

        reduced = pca_rows(vectors, ctx.spectral.reduced.shape[1], sample=5_000,
                           seed=ctx.seed)
        nb_ids, _ = search_neighbour_lists(reduced, sources, 2 * cfg.neighbours, index,
                                           backend, None)
        nb_scores = exact_scores(vectors, vectors, nb_ids)
        order = np.argsort(-nb_scores, axis=1, kind="stable")[:, :cfg.neighbours]
        return (np.take_along_axis(nb_ids, order, axis=1),
                np.take_along_axis(nb_scores, order, axis=1))
    return search_neighbour_lists(vectors, sources, cfg.neighbours, index, backend, store)


def search_neighbour_lists(vectors: Any, sources: np.ndarray, m: int, index: IndexOptions,
                           backend: Any, store: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every row's ``m`` nearest rows of other sources ``(ids, scores)`` (N, m), best first,
    -1 padded, through the index mine's options pick (``store``: a saved index of its
    rows is reused; None for other vectors), by the one search entry point.

    ``vectors`` an array, or rows computed when read (a :class:`~pairkit.core.row_view.RowView`,
    e.g. :func:`pairkit.mine.whitening.whitened_rows`): the index is built from them block by
    block and searched :data:`LIST_QUERY_BLOCK` rows at a time, so no (N, d) array of them
    is made where a FAISS index on the CPU takes them (an exact, IVF or IVF-PQ one; the
    torch engine and HNSW get the array); the same lists."""
    from pairkit.index.open import open_searcher
    from pairkit.mine.clusters import (
        approximate_widths,
        big_source_rows,
        largest_source_widths,
        other_sources,
        own_source_widths,
        width_blocks,
    )

    n = len(vectors)
    if not isinstance(vectors, np.ndarray) and (
            (backend is not None and backend.name == "torch") or index.cpu_kind(n) == "hnsw"):
        vectors = vectors[:]
    if isinstance(vectors, np.ndarray):
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    opened = open_searcher(vectors, index,
                           store_root=None if store is None else store.local_root,
                           content_id=None if store is None else store.content_id,
                           engine=backend)
    # an exact search: each row m + its own source deep (the same lists as m + the largest
    # source's); an approximate one whose first hits don't depend on k (IVF-Flat): every
    # row alike, but for the rows of a big source (approximate_widths); any other (IVF-PQ,
    # float16, HNSW: a deeper search re-ranks more): every row m + the largest source
    if opened.excludes:
        widths = own_source_widths(sources, m)
    elif opened.hits_independent_of_k:
        widths = approximate_widths(sources, m)
    else:
        widths = largest_source_widths(sources, m)
    ids = np.full((n, m), -1, dtype=np.int64)
    scores = np.full((n, m), -np.inf, dtype=np.float32)
    if len(np.unique(widths)) <= 1:  # one width (the usual): blocks of rows in order
        blocks: Any = [(int(widths[0]), slice(lo, min(n, lo + LIST_QUERY_BLOCK)))
                       for lo in range(0, n, LIST_QUERY_BLOCK)]
    else:  # the rows of one width together, a deep one in fewer rows at a time, a big
        # source skipped by the exact search
        blocks = width_blocks(widths, LIST_QUERY_BLOCK,
                              big_source_rows(sources) if opened.excludes else None)
    for width, rows in blocks:
        if width == 0:
            found_s, found_i = opened.search_outside(vectors[rows], m, sources[rows],
                                                     sources)
        else:
            found_s, found_i = opened.search(vectors[rows], width)
        ids[rows], scores[rows] = other_sources(found_s, found_i, sources, m,
                                                query_sources=sources[rows])
    return ids, scores


# rows searched at a time for the rules' neighbour lists: the results and the other-source
# filter's temporaries (~100 bytes a row and hit) stay ~0.15 GB at any N
LIST_QUERY_BLOCK = 131_072
