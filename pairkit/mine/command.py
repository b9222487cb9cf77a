"""``pairkit mine`` from a store folder to a pair-table file (or stdout) and a stats file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pairkit.errors import PairkitError, UsageError
from pairkit.mine.hard_negatives import IndexOptions, MineConfig


def mine_to_files(
    store: Path, output: str, relation: str | None, fmt: str, config: MineConfig,
    index: IndexOptions, fn_config: Any, stats_path: Path | None, force: bool = False,
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    ray: str | None = None,
) -> dict[str, Any]:
    """Mine the store at ``store`` and write the table to ``output`` (``-``: JSON Lines
    on stdout) and the stats to ``stats_path``; returns the stats dict. Outputs are
    checked before any work and written atomically. ``ray``: a Ray cluster address; the
    blocks of anchors are mined there (the index and the false-negative context are built
    here once and shipped), with the same result."""
    from pairkit.core.atomic import atomic_open, check_output
    from pairkit.core.paths import check_output_apart
    from pairkit.core.store import Store
    from pairkit.core.tables import check_table_output, table_kind, write_table
    from pairkit.mine.hard_negatives import mine_store
    from pairkit.mine.summary import unknown_pairs_warning

    if stats_path is not None and str(stats_path) == output:
        raise UsageError("--stats and -o must be different files")
    check_output_apart(output, [store])
    check_output_apart(stats_path, [store], "--stats")
    table_kind(output)  # fail on a bad extension before any work
    if output != "-":
        check_table_output(output, force)
    if stats_path is not None:
        check_output(stats_path, force, what="stats file")
    def run(map_blocks: Any = None) -> tuple[Any, dict[str, Any]]:
        st = Store.open(store, verify=True)
        return mine_store(st, relation, config, index, fn_config, fmt, progress=progress,
                          on_start=on_start, map_blocks=map_blocks)

    if ray:
        index = cpu_search(index, "mine")
        table, stats = on_ray(ray, run)
    else:
        table, stats = run()
    warning = unknown_pairs_warning(stats)
    if warning and on_warning is not None:
        on_warning(warning)
    write_table(table, output, force=force, part_rows=anchor_parts(table, config.batch_size))
    if stats_path is not None:
        with atomic_open(stats_path, replace=force) as fh:
            json.dump(stats, fh, indent=2)
            fh.write("\n")
    return stats


def anchor_parts(table: Any, per_part: int) -> list[int]:
    """Row counts of the parts of a dataset output (``-o DIR/``): ``per_part`` anchors each
    (``--batch-size``), in table order (rows are grouped by anchor)."""
    import numpy as np

    ids = table["anchor_id"].to_numpy()
    if len(ids) == 0:
        return [0]
    first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])  # first row of each anchor
    starts = first[::max(1, per_part)]
    return np.diff(np.r_[starts, len(ids)]).astype(int).tolist()


def cpu_search(index: IndexOptions, command: str) -> IndexOptions:
    """``--ray``: the search runs on the workers' CPUs with FAISS (an index built on a GPU
    here could not be shipped to them); an explicit GPU device or the torch engine is
    bad usage."""
    from dataclasses import replace

    if index.device not in ("auto", "cpu") or index.backend == "torch":
        raise UsageError(f"{command} --ray searches on the workers' CPUs with FAISS: use "
                         "--device cpu (or auto) and --backend faiss (or auto)")
    return replace(index, device="cpu", backend="faiss")


def on_ray(address: str, run: Callable[[Any], tuple[Any, dict[str, Any]]]
           ) -> tuple[Any, dict[str, Any]]:
    """``run(map_blocks)`` with the blocks of anchors mined on the Ray cluster at
    ``address``. With ``local``, ``run`` starts in a thread at once (store, index,
    false-negative context) while this thread starts Ray and the workers (whose processes
    start and import meanwhile); the blocks wait for them. A cluster to join is joined
    first (quick, and a wrong address fails before any work)."""
    import threading

    from pairkit.distributed import connect, require_ray
    from pairkit.distributed.pool import BlockMapper
    from pairkit.mine.hard_negatives import mine_block

    require_ray()
    if address != "local":
        cluster = connect(address)
        mapper = BlockMapper(cluster, "mining a block of anchors", warm=mine_block)
        try:
            table, stats = run(mapper)
        finally:
            mapper.close()
        stats["ray"] = cluster.describe()
        return table, stats
    ready = threading.Event()
    box: dict[str, Any] = {}

    def map_blocks(fn: Any, shared: Any, blocks: list[Any]) -> Any:
        ready.wait()
        if "mapper" not in box:
            raise PairkitError("the Ray cluster did not start")
        return box["mapper"](fn, shared, blocks)

    def work() -> None:
        try:
            box["result"] = run(map_blocks)
        except BaseException as exc:  # raised again in the calling thread
            box["error"] = exc

    thread = threading.Thread(target=work, name="pairkit-mine", daemon=True)
    thread.start()
    try:
        cluster = connect(address)
        box["mapper"] = BlockMapper(cluster, "mining a block of anchors", warm=mine_block)
    finally:
        ready.set()
        thread.join()  # also when Ray failed: the thread stops at its first block
        if "mapper" in box:
            box["mapper"].close()
    if "error" in box:
        raise box["error"]
    table, stats = box["result"]
    stats["ray"] = cluster.describe()
    return table, stats
