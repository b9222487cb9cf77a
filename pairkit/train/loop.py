"""The training loop: AdamW, cosine schedule with warmup, per-epoch validation,
collapse guard, atomic per-epoch checkpoints, resume.

The store's vectors are loaded once (onto the GPU when they fit, else kept in
host memory and each batch copied over); a batch is an index gather of the
rows of its anchors, positives and mined negatives. The steps live in their own
modules: the run's options (:mod:`~pairkit.train.config`), its pairs
(:mod:`~pairkit.train.run_pairs`), the head folder (:mod:`~pairkit.train.head_folder`),
resume state (:mod:`~pairkit.train.resume`), one epoch (:mod:`~pairkit.train.epoch`)
and its end (:mod:`~pairkit.train.epoch_end`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.devices import autocast_dtype, resolve_device, resolve_precision
from pairkit.core.lock import writer_lock
from pairkit.errors import PairkitError, allocation_failed
from pairkit.train.config import (
    TrainConfig,
    TrainHook,
    TrainResult,
    check_head_dims,
    check_whitening_memory,
    head_spec,
)
from pairkit.train.epoch import batches, device_data, lr_at, make_autocast, train_epoch
from pairkit.train.epoch_end import (
    MIN_CENTRED_ROWS,
    MIN_ROWS_PER_DIM,
    check_outputs_finite,
    collapse_note,
    epoch_record,
    eval_items,
    eval_pairs,
    evaluate,
    fitted_whitening,
    save_epoch,
    save_whitening_file,
    whitening_record,
)
from pairkit.train.head import CONFIG, build_module, write_config
from pairkit.train.head_folder import PLOT, head_config, prepare_head_dir, save_replacing
from pairkit.train.output_whitening import fit_rows
from pairkit.train.plot import write_plot
from pairkit.train.resume import ResumeState, fingerprint, resume_state
from pairkit.train.run_pairs import epoch_pairs, run_pairs

if TYPE_CHECKING:
    import pandas as pd

    from pairkit.core.store import Store


def train_head(store: Store, out: Path, cfg: TrainConfig, *,
               table: pd.DataFrame | None = None, table_name: str | None = None,
               resume: bool = False, force: bool = False,
               hook: TrainHook | None = None) -> TrainResult:
    """Train a head on ``store`` (pairs from ``table``, else ``cfg.relation``) into ``out``.

    Writes head.safetensors, train_log.jsonl, checkpoint.pt and config.json after every
    epoch (each atomically) and the plot at the end, holding the head folder's writer
    lock (a second train into ``out`` stops with the holder's name). Raises PairkitError
    on bad input and on a NaN loss.
    """
    held = [table]  # no frame of this call keeps the table past the set-up (run_pairs)
    del table
    with writer_lock(Path(out), "head"):
        return _train_locked(store, Path(out), cfg, held=held, table_name=table_name,
                             resume=resume, force=force, hook=hook)


def _train_locked(store: Store, out: Path, cfg: TrainConfig, *,
                  held: list[pd.DataFrame | None], table_name: str | None,
                  resume: bool, force: bool, hook: TrainHook | None) -> TrainResult:
    from pairkit.core.threads import import_torch

    torch = import_torch()
    from pairkit.train.adamw import AdamW

    table = held.pop()
    cfg.check()
    check_head_dims(cfg, store.dim)
    if table is None and cfg.relation is None:
        raise PairkitError("give a pair table (--pairs) or a relation (--relation instance|label)")
    if store.count < 2:
        raise PairkitError(f"store {store.root} has {store.count} items: nothing to train on")
    notes: list[str] = []

    def note(message: str) -> None:
        notes.append(message)
        if hook is not None:
            hook.note(message)

    pairs = run_pairs(store, cfg, table, table_name, note)
    del table  # only the pair arrays are used from here on: a large table's memory is freed
    replaced = prepare_head_dir(out, force, resume)  # replaced at the first save
    device = torch.device(resolve_device(cfg.device))
    precision = resolve_precision(cfg.precision, device.type)
    autocast = make_autocast(device, autocast_dtype(precision))
    data, msg = device_data(store.vectors(np.float32), pairs.groups, device)
    data.excluded = pairs.excluded
    if msg:
        note(msg)

    spec = head_spec(cfg, store.dim)
    spec.check()
    torch.manual_seed(cfg.seed)
    try:
        module = build_module(spec).to(device)
    except (MemoryError, RuntimeError) as exc:
        if not allocation_failed(exc):
            raise
        raise PairkitError(f"a {spec.kind} head {spec.in_dim}->{spec.out_dim}"
                           + (f" (hidden {spec.hidden})" if spec.hidden else "")
                           + f" of {head_parameters(spec):,} parameters does not fit in "
                           "memory: lower --hidden or --out-dim") from None
    if (~pairs.val_mask).sum() >= MIN_CENTRED_ROWS:  # else no whitening is fitted
        check_whitening_memory(cfg, spec.out_dim)  # refused now, not after the epochs
    optimizer = AdamW(module.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None

    total_steps = len(batches(pairs.examples, cfg.batch_size)) * cfg.epochs
    warmup_steps = int(cfg.warmup * total_steps)
    run_id = fingerprint(cfg, store, pairs.pairs_id)

    def result(records: list[dict[str, Any]], **more: Any) -> TrainResult:
        return TrainResult(head=out, records=records, device=str(device), precision=precision,
                           streaming=data.streaming, examples=pairs.examples, notes=notes,
                           **more)

    state = ResumeState()
    if resume:
        state, complete = resume_state(out, cfg, run_id, module, optimizer, scaler, note,
                                       store.dim)
        if complete:
            dims = spec.out_dim if state.whitening_dims is None else int(state.whitening_dims)
            return result(state.records, trained=False, head_kind=spec.kind, out_dim=dims,
                          module_dim=spec.out_dim, whitened=state.whitening_dims is not None)
    items, metrics_on = eval_items(pairs.val_mask, cfg, pairs.groups, note)
    white_rows = fit_rows(np.flatnonzero(~pairs.val_mask), cfg.seed)

    def config(epochs_done: int, complete: bool, stopped: str | None,
               whitening: Any) -> dict[str, Any]:
        return head_config(cfg, spec, store, pairs.pairs_id, run_id, device=str(device),
                           precision=precision, streaming=data.streaming,
                           epochs_done=epochs_done, complete=complete, stopped=stopped,
                           whitening=whitening_record(whitening, cfg, len(white_rows)))

    records, step = state.records, state.step
    if state.epoch >= cfg.epochs:
        if state.config_epochs_done == state.epoch:  # interrupted, or stopped on collapse
            note(f"--resume: {out} stopped after {state.epoch} of its {state.planned} epochs: "
                 f"finished at {state.epoch} epochs (--epochs {cfg.epochs}), its whitening "
                 "fitted")
        else:  # killed after its last checkpoint but before config.json: finish the folder
            note(f"{out}: the run was stopped before its {CONFIG} was written; written now")
        whitening = fitted_whitening(module, data, pairs, white_rows, cfg, spec.out_dim)
        save_whitening_file(out, whitening)
        write_config(out, config(state.epoch, True, None, whitening))
        if records:
            write_plot(out / PLOT, records)
        return result(records, head_kind=spec.kind,
                      **dims_out(spec.out_dim, whitening, cfg, len(white_rows)))
    if hook is not None:
        hook.start(pairs.examples * (cfg.epochs - state.epoch),
                   f"train {cfg.loss.name} on {device}")
    stopped: str | None = None
    whitening = None
    module.train()
    for epoch in range(state.epoch, cfg.epochs):
        shuffled = epoch_pairs(pairs, cfg, epoch)
        loss_sum, step, seconds = train_epoch(
            module, optimizer, scaler, data, shuffled, cfg, epoch=epoch, step=step,
            total_steps=total_steps, warmup_steps=warmup_steps, precision=precision,
            autocast=autocast, hook=hook)
        metrics = evaluate(module, data, eval_pairs(pairs, shuffled, cfg), items, cfg, autocast)
        check_outputs_finite(metrics, epoch, cfg, precision)
        record = epoch_record(epoch, loss_sum, len(shuffled),
                              lr_at(step - 1, total_steps, warmup_steps, cfg.lr), seconds,
                              metrics_on, metrics)
        records.append(record)
        if record["collapsed"]:
            stopped = "collapse" if cfg.stop_on_collapse else None
            note(collapse_note(record, cfg.stop_on_collapse))
        last = epoch + 1 == cfg.epochs
        saved = (module, optimizer, scaler, records, step, run_id, cfg.epochs)
        # fitted once, on the last epoch's outputs (an eigen solve of the output dim's
        # covariance: seconds at 1,280 dims; an unfinished head has none)
        try:
            whitening = (fitted_whitening(module, data, pairs, white_rows, cfg, spec.out_dim)
                         if last else None)
        except (MemoryError, RuntimeError) as exc:
            if not allocation_failed(exc):
                raise
            # the epochs are kept, unfinished: --resume fits another whitening (or none)
            save_run_epoch(out, replaced, *saved, config(epoch + 1, False, stopped, None),
                           None)
            raise PairkitError(whitening_oom(cfg, spec.out_dim, epoch + 1, out)) from None
        replaced = save_run_epoch(out, replaced, *saved,
                                  config(epoch + 1, last, stopped, whitening), whitening)
        if hook is not None:
            hook.epoch_done(record)
        if last or stopped is not None:
            break
    write_plot(out / PLOT, records)
    return result(records, stopped=stopped, head_kind=spec.kind,
                  **dims_out(spec.out_dim, whitening, cfg, len(white_rows)),
                  mined_positives=0 if pairs.mined is None else pairs.mined.total)


def save_run_epoch(out: Path, replaced: set[str], *saved: Any) -> set[str]:
    """:func:`save_epoch` of ``saved``; the first save over an old head (``replaced``:
    its files) through :func:`save_replacing`, so the old head stays until it is whole.
    Returns what is left to replace (nothing after a save)."""
    if replaced:
        save_replacing(out, replaced, save_epoch, *saved)
    else:
        save_epoch(out, *saved)
    return set()


def whitening_oom(cfg: TrainConfig, out_dim: int, epochs: int, out: Path) -> str:
    """The message of a whitening that ran out of memory after ``epochs`` were trained and
    saved: which whitening, and how to finish the head without training again."""
    if cfg.pair_dims():
        what = ("pair whitening (--pair-whitening "
                f"{'all' if cfg.pair_whitening is None else cfg.pair_whitening})")
        instead = "--pair-whitening 0 (none) or fewer dims"
    else:
        what = f"output whitening (--whiten {cfg.whiten:g})"
        instead = "--whiten 0 --pair-whitening 0 (none)"
    trained = f"{epochs} trained epoch{'s are' if epochs != 1 else ' is'}"
    return (f"out of memory fitting the {what} of the head's {out_dim:,} output dims: its "
            f"{trained} saved in {out}; finish the head without training again: rerun with "
            f"--resume and {instead}")


def head_parameters(spec: Any) -> int:
    """The number of weights of the head ``spec`` (a :class:`HeadSpec`)."""
    i, o, h = spec.in_dim, spec.out_dim, spec.hidden or 0
    if spec.kind == "linear":
        return i * o
    return i * h + h + h * o + o  # mlp, residual (down and up, with biases)


def dims_out(module_dim: int, whitening: Any, cfg: Any, rows: int) -> dict[str, Any]:
    """The result's ``out_dim`` (the whitening's, else the module's), ``module_dim``,
    ``whitened`` and, when asked for but not fitted, ``whitening_skipped`` (why)."""
    out_dim = module_dim if whitening is None else int(whitening[1].shape[1])
    skipped = None
    if whitening is None and cfg.pair_dims():
        skipped = (f"{rows} training rows, under the {MIN_CENTRED_ROWS} it centres on"
                   if rows < MIN_CENTRED_ROWS else
                   "the positive pairs do not differ, or there are none (or no negative "
                   "pair to keep fewer dims by)")
    elif whitening is None and cfg.whiten > 0:
        skipped = (f"{rows} training rows for {module_dim} output dims, under "
                   f"{MIN_ROWS_PER_DIM} per dim")
    return {"out_dim": out_dim, "module_dim": module_dim, "whitened": whitening is not None,
            "whitening_skipped": skipped}
