"""``mine`` with the blocks writing the table (the driver's side of
:mod:`pairkit.mine.block_parts`): a run whose driver holds neither the vectors nor the
table.

When the blocks run on workers that read the store themselves (``mine --ray``) and the
output is a local ``.parquet`` file or ``-o DIR/`` (or a dataset on object storage, ``-o
s3://bucket/pairs/``: the workers put their parts there under the run's token and the
driver commits them by one conditional write, :mod:`pairkit.core.remote_parts`): the
driver plans the blocks (the relation, the anchors' positive sets; with false-negative
rules or mined positives a Ray task plans them with the vectors, the rules' context, the
index and the mined positives: :mod:`pairkit.mine.rules_plan`), the workers (without
rules) read the store's rows in place from its shards (FAISS on the CPU, not ``hnsw``:
:func:`streams_rows`; each worker's IVF lists in the store's float16, never a float32
copy), score their anchors' positives, mine, and write their block's part into a temp
folder beside the output; the driver keeps the blocks' summaries (counts, and the scores
spilled to disk for the exact quantiles) and commits the parts in block order
(:func:`pairkit.core.table_parts.commit_parts`). A block that fails for good, or a
driver stopped before the commit, leaves no output (a killed driver leaves the temp
folder ``.NAME.XXXXXXXX.tmp`` beside it, removed by a later run to that output once a
day old, when the command checks its output: :func:`pairkit.core.tables.check_table_output`);
a rerun starts afresh. Table and stats are the local path's (tests/distributed).

The same path runs in one process without ``--ray`` (:func:`mine_parts` with no
executor): the blocks one after the other, the rows read in place from the store's shards
and the index built from them (the store's snapshot opened once), so that a local ``mine``
of a store larger than memory as float32 holds neither a float32 copy nor the table
(docs/mine.md#memory; tests/mine/test_streamed.py). With false-negative rules or mined
positives the plan is made here as a cluster's task makes it (with the vectors, the
context, the index and the mined positives, which the blocks use in place) and the
blocks write their parts: the vectors are held, the table is not.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pairkit.core.atomic import scratch_folder
from pairkit.core.remote import is_url
from pairkit.index.options import IndexOptions, index_seed
from pairkit.mine.config import MineConfig


def streams_parts(output: str, fn_config: Any, positives: Any, executor: Any = None,
                  index: IndexOptions | None = None) -> bool:
    """Whether ``mine`` can run this way (see the module docstring): a local parquet
    output, or with an executor a dataset on object storage (``-o s3://bucket/pairs/``:
    the blocks put their parts there, :mod:`pairkit.core.remote_parts`); blocks run by an
    executor, or here (``executor`` None, see :func:`mine_parts`): with false-negative
    rules or mined positives (planned with the vectors, any index), or streamed from the
    shards with FAISS on the CPU and no ``hnsw`` index (``index``: the run's options)."""
    from pairkit.core.tables import table_kind
    from pairkit.mine.rules_plan import has_rules

    if output == "-" or (is_url(output) and (executor is None or not output.endswith("/"))):
        return False
    if executor is None and not has_rules(fn_config, positives) and not streams_rows(
            index or IndexOptions()):
        return False
    return table_kind(output) in ("parquet", "dataset")


def streams_rows(index: IndexOptions) -> bool:
    """Whether the blocks' index can be built from the rows read in place
    (:class:`pairkit.core.shard_rows.ShardRows`): FAISS on the CPU, not ``hnsw`` (which
    needs the rows in memory); the torch and GPU searches take the float32 copy."""
    from pairkit.index.open import engine_for

    where = engine_for(index)
    return where.name != "torch" and not where.gpu and index.kind != "hnsw"


@dataclass(frozen=True)
class PlanSpec:
    """What :func:`plan_job` needs to plan the blocks of a run where it runs."""

    relation: str | None
    config: MineConfig
    searcher: Any
    rows_from: Any  # StoreRows: the store every node reads, and its content id
    folder: str
    fmt: str
    rules: Any = None  # RulesSpec (pairkit.mine.rules_plan): planned with the vectors
    remote: Any = None  # RemoteParts: the parts put straight on object storage
    # the IVF lists split into this many partitions (pairkit.mine.ivf_parts), of the
    # index ``lists_spec`` (resolved): 0, the index built whole where the blocks run
    partitions: int = 0
    lists_spec: IndexOptions | None = None


def plan_job(spec: PlanSpec, white: Any = None) -> tuple[Any, dict[str, Any]]:
    """``(PartsJob, info)``: the blocks of the run planned from the store (its relation,
    the anchors' positive sets: :func:`pairkit.mine.hard_negatives.plan_blocks` without
    the vectors) and the few facts the driver needs (anchors, first k, the relation's
    description and stats, whether the store has labels). Run by a Ray task where it can
    be, so that the plan stays in Ray's object store. ``white``: the rules' whitened
    neighbour lists searched by the workers (:mod:`pairkit.mine.white_parts`)."""
    # the store as committed under its content id (this process's snapshot when pinned)
    return plan_of(spec.rows_from.open(verify=True), spec, white)


def plan_of(st: Any, spec: PlanSpec, white: Any = None) -> tuple[Any, dict[str, Any]]:
    """:func:`plan_job` of the opened store ``st`` (with ``spec.rules``:
    :func:`pairkit.mine.rules_plan.plan_with_rules`)."""
    from pairkit.core.relations import load_relation
    from pairkit.core.store import codes_of
    from pairkit.mine.block_parts import PartsJob, PartsPlan
    from pairkit.mine.hard_negatives import plan_blocks

    if spec.rules is not None:
        from pairkit.mine.rules_plan import plan_with_rules

        return plan_with_rules(st, spec, white)
    items = plan_items(st, spec.relation)
    rel = load_relation(spec.relation, items)
    # the instance relation's groups are the source codes (the same call): not factorised
    # twice
    sources = rel.group if rel.kind == "instance" else codes_of(items["source"])[0]
    blocks = plan_blocks(None, sources, rel, spec.config,
                         spec.searcher, rows_from=spec.rows_from, n_items=st.count)
    labelled = bool(len(items)) and bool(items["label"].notna().any())
    del items
    reads = None  # with the lists split, from object storage: how the blocks read rows
    if spec.partitions and spec.lists_spec is not None:  # the lists split: ivf_parts
        from pairkit.mine.ivf_parts import (
            ListCandidates,
            blocks_read_by_ranges,
            checked_block_bytes,
            plan_lists,
        )

        rows = st.rows()
        if len(rows) != st.count:  # plan_in_child's snapshot holds no shard: opened here
            rows = spec.rows_from.open(verify=False).rows()  # (verified by the parent)
        lists = plan_lists(rows, spec.lists_spec, spec.partitions)
        del rows
        if is_url(spec.rows_from.store):
            reads = ("the store fetched whole by each (their anchors' and positives' rows "
                     "span most of it)")
            if blocks_read_by_ranges(
                    blocks.anchors, blocks.ctx.pos_offsets, blocks.ctx.pos_ids,
                    spec.config.batch_size, st.count,
                    st.dim * (2 if st.dtype == "float16" else 4),
                    checked_block_bytes(st.manifest)):
                # the blocks read only their anchors' and positives' rows: by byte
                # ranges, so that no worker holds the store (the partitions their lists)
                blocks = replace(blocks, rows_from=lists_rows(spec.rows_from))
                reads = "their anchors' and positives' rows read by byte ranges"
        blocks = replace(blocks, searcher=None, skip_class=False, anchor_searcher=ListCandidates(
            lists, lists_rows(spec.rows_from), spec.folder, blocks.anchors,
            spec.config.batch_size, blocks.k0,
            token=spec.remote.token if spec.remote is not None else ""))
    info = {"anchors": len(blocks.anchors), "k0": blocks.k0, "relation": rel.description,
            "relation_stats": relation_stats(rel), "labelled": labelled}
    if reads is not None:
        info["blocks_read"] = reads
    plan = PartsPlan(spec.folder, spec.fmt, st.content_id, labelled, remote=spec.remote)
    return PartsJob(blocks, plan), info


def plan_items(st: Any, relation: str | None) -> Any:
    """The item table's columns the relation's plan reads (``source`` and ``label``; the
    whole table for a ``pairs:`` relation, which matches paths), not as Python strings when
    the table is not parsed yet: the sources as integer codes
    (:func:`pairkit.core.columns.hashed_codes`), the labels Arrow-backed (measured at 4M
    rows: the plan's task 0.07 GB smaller than with Python strings, docs/benchmarks.md).
    Codes and the relation are the same (codes in order of first appearance, missing
    labels -1, as :func:`pairkit.core.store.codes_of` gives)."""
    import pandas as pd

    if (relation or "").startswith("pairs:") or st.count == 0 or st.items_parsed:
        return st.items
    from pairkit.core.columns import hashed_codes
    from pairkit.core.heap import return_free_memory

    # the sources as codes from their hashes, read batch by batch (~40 bytes a row at the
    # peak, where the factorisation of the strings took ~130 at 4M rows): the same codes
    source = hashed_codes(lambda: st.item_batches("source"), st.count).codes
    (label,) = st.item_columns("label")
    return_free_memory()
    return pd.DataFrame({"source": source, "label": pd.arrays.ArrowExtensionArray(label)})


PLAN_APART_ROWS = 1_000_000  # streamed here: stores above this are planned in a child


def plan_here(store: Any, spec: PlanSpec, white: Any = None) -> tuple[Any, dict[str, Any]]:
    """The plan of a run streamed here (:func:`mine_parts` without an executor), with
    the store's paths and label codes kept for the blocks
    (:func:`pairkit.mine.block_parts.store_columns`). Above :data:`PLAN_APART_ROWS` rows
    it is made in a child process (spawned) from the snapshot's item table: what only
    planning needs (the pandas item table, the relation's factorisation of 8M sources:
    about 1 GB at 8M rows, much of it kept by the allocators after it is freed) goes
    with the child, and this process receives the plan's arrays and the paths. The
    same plan either way (tests/mine/test_streamed.py)."""
    from pairkit.mine.block_parts import keep_columns, read_columns

    # stdin is read here; a plan with the rules holds the vectors, the context and the
    # index, which the blocks use here: never pickled back from a child
    if store.count <= PLAN_APART_ROWS or spec.relation == "pairs:-" or spec.rules is not None:
        keep_columns(store.content_id, *read_columns(store))  # before the table is parsed
        job, info = plan_of(store, spec, white)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=context) as pool:
            job, info, path, codes = pool.submit(
                plan_in_child, store.root, store.manifest, store.items_bytes(), spec).result()
        keep_columns(store.content_id, path, codes)
        del path
        # the plan's copies of these are not pinned to this process's snapshot
        job.blocks.rows_from = spec.rows_from
        if job.blocks.anchor_searcher is None:
            job.blocks.searcher = spec.searcher
        else:  # the lists split (pairkit.mine.ivf_parts): its searcher reads the store
            job.blocks.anchor_searcher.rows_from = lists_rows(spec.rows_from)
    store.release_items()
    return job, info


def lists_rows(rows_from: Any) -> Any:
    """Where the split lists' searches (:mod:`pairkit.mine.ivf_parts`) read the store:
    ``rows_from`` by byte ranges on object storage (``ranged``: a partition's cells and
    the anchors are read once, a deeper search's probed cells; nothing held), the same
    rows otherwise."""
    return replace(rows_from, ranged=True)


def plan_in_child(root: Any, manifest: dict[str, Any], items: bytes, spec: PlanSpec
                  ) -> tuple[Any, dict[str, Any], Any, Any]:
    """:func:`plan_here`'s child: the plan, the paths and the label codes of the store
    snapshot whose manifest and item table's bytes are given."""
    from pairkit.core.store import Store
    from pairkit.mine.block_parts import read_columns

    st = Store(root, manifest)
    st.hold([], items)
    path, codes = read_columns(st)
    job, info = plan_of(st, spec)
    return job, info, path, codes


def mine_parts(store_path: Any, relation: str | None, config: MineConfig,
               index: IndexOptions, fmt: str, output: str, force: bool, map_blocks: Any,
               progress: Callable[[int], None] | None = None,
               on_start: Callable[[int], None] | None = None, fn_config: Any = None,
               positives: Any = None, partitions: int | None = None
               ) -> dict[str, Any] | None:
    """Mine the store at ``store_path`` into ``output`` block by block (module docstring)
    and return the stats of :func:`pairkit.mine.command.mine_store`; None when this run
    can't go this way after all (the blocks would run here without reading the store,
    or a saved index is the driver's to load): the caller mines as usual. The plan is
    made by ``map_blocks.remote_pair`` when the executor has it (a Ray task: the driver
    never holds the relation, the anchors or the item table), else here; a
    ``pairs:FILE`` relation is read here. With false-negative rules (``fn_config``) or
    mined positives (``positives``) the plan is made with the vectors, the rules'
    context, the index and the mined positives (:mod:`pairkit.mine.rules_plan`), by the
    Ray task too: the driver holds none of them; here, by this process, whose blocks then
    use them in place and write their parts (the table is never whole here).

    ``map_blocks`` None: the blocks run here, one after the other, **streamed**: the rows
    are read in place from the store's shards (:class:`pairkit.core.shard_rows.ShardRows`),
    the index is built from them block by block (:func:`pairkit.index.faiss_build.build_index`:
    an ``ivf`` index keeps the store's float16), and each block writes its part as a
    worker would, so this process never holds a float32 copy of the store, the item
    table's paths as Python strings, or the table (docs/mine.md#memory).

    ``partitions``: with an executor, a search that is a float16 IVF
    (:func:`pairkit.mine.ivf_parts.lists_spec`) has its lists
    split over the workers (:mod:`pairkit.mine.ivf_parts`: none holds them all), in one
    partition per worker by default (None); 0 keeps the index built whole by each worker;
    a count forces that many partitions, also here (same table and stats)."""
    from pairkit.core.blocks_here import block_spans, map_here
    from pairkit.core.pairs import FORMATS
    from pairkit.core.store import Store
    from pairkit.core.store_rows import forget_loaded
    from pairkit.core.table_parts import commit_parts
    from pairkit.errors import PairkitError, UsageError
    from pairkit.index.open import engine_for, planned_description
    from pairkit.mine.block_parts import (
        SummaryCounts,
        forget_columns,
        mine_block_part,
        part_name,
    )
    from pairkit.mine.blocks import StoreSearcher
    from pairkit.mine.command import run_stats, saved_index, workers_rows
    from pairkit.mine.rules_plan import RulesSpec, has_rules
    from pairkit.mine.stream_quantiles import StreamQuantiles
    from pairkit.mine.summary import no_negatives_error

    t0 = time.perf_counter()
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {fmt}")
    here = map_blocks is None
    # the partitions of a split search: one per worker by default (two here)
    workers = int(getattr(map_blocks, "workers", 0) or 2)
    with_rules = has_rules(fn_config, positives)
    # verified where it is read: by the plan on a cluster; here, once, the run's snapshot
    store = Store.open(store_path, verify=here)
    if store.count == 0:
        raise PairkitError(f"store {store.root} is empty: nothing to mine")
    index = replace(index, seed=index_seed(config.seed))
    rules = RulesSpec(fn_config, positives, index, shipped=not here) if with_rules else None
    where = engine_for(index)
    rows_from = local_rows(store) if here else workers_rows(store, map_blocks, None)
    if rows_from is None or (config.hard and saved_index(store, index, where)):
        return None
    if not here and streams_rows(index):  # the workers too stream (and a plan with rules)
        rows_from = replace(rows_from, streamed=True)
    if here:
        map_blocks = map_here
    searcher, index_text = None, "none (easy negatives: uniform sample)"
    if config.hard and rules is None:  # with rules: the plan's task builds the index
        searcher = StoreSearcher(rows_from, replace(index, device=where.device,
                                                    backend=where.name))
        index_text = planned_description(store.count, store.dim, index, where,
                                         STREAMED if here else "built on each worker")
    put_parts, target = parts_folder(output)
    folder: Path | None = None  # the local parts folder, made inside the try
    scratch = contextlib.ExitStack()  # and removed with whatever it holds by its finally
    split, lists = 0, None
    if searcher is not None and partitions != 0:
        from pairkit.mine.ivf_parts import lists_partitions, lists_spec

        lists = lists_spec(store.count, store.dim, searcher.options)
        if lists is not None and (partitions or not here):
            split = partitions or lists_partitions(
                store.count, store.dim, lists, workers)
            split = max(1, min(split, int(lists.nlist or 1)))
            index_text = planned_description(
                store.count, store.dim, index, where,
                f"{STREAMED if here else 'built on the workers'}, its lists in {split} "
                "partitions, each searched by one worker")
    counts = None
    try:
        if target is not None:  # an interrupt from here removes it
            folder = scratch.enter_context(scratch_folder(target))
        spec = PlanSpec(relation, config, searcher, rows_from,
                        put_parts.url if folder is None else str(folder), fmt, rules,
                        put_parts, split, lists if split else None)
        remote = getattr(map_blocks, "remote_pair", None)
        if here or (relation or "").startswith("pairs:"):
            remote = None  # planned here: a pairs: relation is read here
        white = white_info = None
        if rules is not None and partitions != 0 and (partitions or not here):
            # the rules' whitened neighbour lists searched by the workers, their lists split
            from pairkit.mine.white_parts import needs_white, split_white_lists

            if needs_white(rules.fn_config, rules.positives):
                white, white_info = split_white_lists(
                    spec, map_blocks, remote, workers, partitions or 0)
        if here:
            job, info = plan_here(store, spec, white)
        elif remote is not None:
            job, info = remote(plan_job, spec, white)
        else:
            job, info = plan_job(spec, white)
        if white_info is not None:
            info.setdefault("seconds", {})["whitened_lists"] = white_info["seconds"]
            if folder is None:  # merged by the plan: its objects are no longer needed
                from pairkit.mine.white_parts import remove_white

                remove_white(spec.folder, put_parts.token, white_info)
        del white
        n = info["anchors"]
        counts = SummaryCounts(config.num_negatives, config.hard, info["k0"],
                               StreamQuantiles(spec.folder, "pos"),
                               StreamQuantiles(spec.folder, "neg"))
        if on_start is not None:
            on_start(n)
        t1 = time.perf_counter()
        if split:  # each partition's lists searched by one worker, before the blocks
            from pairkit.mine.ivf_parts import search_partition

            for _ in map_blocks(search_partition, job, list(range(split))):
                pass
        spans = block_spans(n, config.batch_size)
        rows: list[int] = []
        records: list[Any] = []  # the parts' records, put on object storage
        for (b0, b1), summary in zip(spans, map_blocks(mine_block_part, job, spans),
                                     strict=True):
            counts.add(summary)
            rows.append(summary.rows)
            records.append(summary.part)
            if progress is not None:
                progress(b1 - b0)
        if split and folder is None:
            # the partitions' candidate objects are no longer needed (a local parts
            # folder, candidates and all, is removed below)
            from pairkit.mine.ivf_parts import remove_candidates

            remove_candidates(spec.folder, len(spans), split, put_parts.token)
        if folder is None and rules is not None and rules.mines_positives:
            from pairkit.mine.mined_parts import remove_mined

            remove_mined(spec.folder, len(spans), put_parts.token)  # read by the blocks
        del job
        if searcher is not None:
            searcher.release()  # built here when streamed: freed before the commit
        summary_stats = counts.stats()
        if (empty := no_negatives_error(summary_stats, config)) is not None:
            raise PairkitError(empty)  # nothing committed: the parts go with the folder
        counts.pos.close()
        counts.neg.close()
        if folder is None:
            put_parts.commit(records, force)
            put_parts = None  # committed: nothing of it to remove
        else:
            commit_parts(folder, [part_name(i) for i in range(len(spans))], rows, output,
                         force)
    finally:
        if counts is not None:
            counts.pos.close()
            counts.neg.close()
        scratch.close()
        if put_parts is not None:
            put_parts.abort()
        if here:  # this process's copies of the store's rows and paths
            forget_loaded()
            forget_columns()
    if "blocks_read" in info:  # the split lists from object storage: say what the
        index_text += f"; the blocks of anchors: {info['blocks_read']}"  # blocks held
    planned = info.get("seconds", {})  # with rules: the plan's context and index
    blocks = counts.seconds  # the blocks' index (built where they run) and search
    stats = run_stats(store, info["relation"], config, fmt, info.get("index", index_text),
                      counts.rows, summary_stats,
                      seconds={"setup": round(t1 - t0, 3),
                               "mine": round(time.perf_counter() - t1, 3),
                               "false_negative_context": 0.0, **planned,
                               "index": round(planned.get("index", 0.0)
                                              + blocks.get("index", 0.0), 3),
                               "search": round(blocks.get("search", 0.0), 3)})
    stats.update(info.get("rules", {}))  # the keys run_stats has, as the rules set them
    stats.update(info.get("after", {}))  # mined positives, the label-free estimate
    if info["labelled"]:
        stats.update(counts.label_record())
    stats.update(info["relation_stats"])
    return stats


def parts_folder(output: str) -> tuple[Any, Path | None]:
    """Where the blocks put their parts: ``(RemoteParts, None)`` for a dataset on object
    storage (:mod:`pairkit.core.remote_parts`: straight into it, under this writer's
    token), else ``(None, the output's path, its folder resolved)``, beside which the
    caller makes its parts folder (:func:`~pairkit.core.atomic.scratch_folder`, an
    absolute path the workers can open). (The stale ones of killed drivers went when
    the command checked its output: ``check_table_output``.)"""
    if is_url(output):
        from pairkit.core.remote_parts import start_parts

        return start_parts(output), None
    target = Path(output.rstrip("/")) if output.endswith("/") else Path(output)
    target.parent.mkdir(parents=True, exist_ok=True)
    return None, target.parent.resolve() / target.name


STREAMED = "built now from the store's shards"  # the index text's origin, streamed here


def local_rows(store: Any) -> Any:
    """The :class:`pairkit.core.store_rows.StoreRows` of a run streamed here: the rows of the
    snapshot ``store`` (opened and verified once) read in place (``streamed``)."""
    from pairkit.core.store_rows import StoreRows

    return StoreRows.of(store, streamed=True, pinned=store)


def relation_stats(rel: Any) -> dict[str, Any]:
    """The stats of a ``pairs:FILE`` relation (rows, unknown rows, examples)."""
    if rel.kind != "pairs":
        return {}
    return {"pairs_rows": rel.rows_total, "pairs_rows_unknown": rel.rows_unknown,
            "pairs_unknown_examples": list(rel.unknown_examples),
            "pairs_rows_empty": rel.rows_empty}
