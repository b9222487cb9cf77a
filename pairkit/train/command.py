"""``pairkit train`` from a store folder and a pair table (a path, ``-`` or a DataFrame) to a
head folder (the command's store-to-files step, :func:`train_to_files`): the checks of the
options, then :func:`pairkit.train.loop.train_head`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pairkit.core.shown import shown_text
from pairkit.errors import PairkitError, UsageError

if TYPE_CHECKING:
    import pandas as pd

    from pairkit.train.config import TrainConfig, TrainHook, TrainResult


def train_to_files(store: str | os.PathLike[str] | Any, output: str | os.PathLike[str],
                   cfg: TrainConfig, *, pairs: str | pd.DataFrame | None = None,
                   resume: bool = False, force: bool = False,
                   hook: TrainHook | None = None) -> TrainResult:
    """Train a head on ``store`` (a folder or an open :class:`~pairkit.core.store.Store`)
    into ``output``: pairs from ``pairs`` (a table path, ``-`` for stdin, or a DataFrame
    from :func:`pairkit.mine_pairs`), else positives from ``cfg.relation`` with in-batch
    negatives. Returns the :class:`~pairkit.train.config.TrainResult`."""
    from pairkit.core.store import Store
    from pairkit.core.tables import read_table
    from pairkit.train.config import check_head_dims, check_table_options
    from pairkit.train.loop import train_head

    if pairs is None and cfg.relation is None:
        raise UsageError("give a pair table with --pairs or a relation with --relation "
                         "instance|label")
    if resume and force:
        raise UsageError("--resume and --force contradict each other: pick one")
    cfg.check()
    check_table_options(cfg, pairs is not None)
    from pairkit.core.paths import check_folder_output, check_output_apart
    from pairkit.train.head_folder import check_head_output

    check_folder_output(output, "-o", "a head is a folder")

    # a wrong -o is refused before the store, the table and torch load
    if not isinstance(store, Store):
        check_output_apart(output, [store])
    if isinstance(pairs, (str, os.PathLike)):
        check_output_apart(output, [pairs])
    check_head_output(Path(output), force, resume)
    st = store if isinstance(store, Store) else Store.open(store)
    check_head_dims(cfg, st.dim)
    if isinstance(pairs, (str, os.PathLike)):
        from pairkit.train.data import check_store_id

        # another store's table is refused from its first row, before the rest is read;
        # passed on unnamed, so that the run lets it go after its set-up
        return train_head(st, Path(output), cfg,
                          table=read_table(str(pairs), first_row=lambda row: check_store_id(
                              row, st.content_id)),
                          table_name=str(pairs), resume=resume, force=force, hook=hook)
    return train_head(st, Path(output), cfg, table=pairs,
                      table_name=None if pairs is None else "DataFrame", resume=resume,
                      force=force, hook=hook)


def check_collapse(result: TrainResult, output: str | os.PathLike[str]) -> None:
    """PairkitError naming the epoch and the head folder when the run stopped because the
    embeddings collapsed (``--stop-on-collapse``)."""
    if result.stopped == "collapse":
        raise PairkitError(f"stopped at epoch {result.records[-1]['epoch']}: the embeddings "
                           "collapsed (--stop-on-collapse); weights of that epoch are in "
                           f"{shown_text(str(output))}")


def summary_line(result: TrainResult, in_dim: int, loss: str, output: str | os.PathLike[str]
                 ) -> str:
    """The command's last line: the head, its dims (and whitening), the loss, the epochs,
    where it ran, the pairs (and mined positives), the speed, the last gap, the folder
    (``nothing trained: ...`` for a complete run that ``--resume`` left as it was)."""
    from pairkit.train.plot import gap_text

    output = shown_text(str(output))  # a newline or ESC in it makes no line or escape
    last = result.records[-1]
    gap = gap_text(last.get("gap"))  # NaN in the log is null
    dims = f"{in_dim}->{result.module_dim}" + (
        f" (outputs whitened to {result.out_dim} dims)" if result.whitened else
        f" (outputs not whitened: {result.whitening_skipped})"
        if result.whitening_skipped else "")
    if not result.trained:
        return (f"nothing trained: {result.head_kind} head {dims}, trained with {loss} for "
                f"{last['epoch']} epochs: {last['metrics_on']} gap {gap} -> "
                f"{output}")
    mined = f", {result.mined_positives} mined positives" if result.mined_positives else ""
    return (f"trained {result.head_kind} head {dims} with {loss} for {last['epoch']} epochs on "
            f"{result.device} ({result.examples} pairs/epoch{mined}, "
            f"{result.pairs_per_second:,.0f} pairs/s over all epochs): {last['metrics_on']} "
            f"gap {gap} -> {output}")
