"""Resume state of a head folder: the run's fingerprint, checkpoint.pt written and read
back, and the checks before ``--resume`` continues a run."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pairkit.core.atomic import atomic_path
from pairkit.core.safe_load import torch_load_weights
from pairkit.errors import PairkitError, UsageError
from pairkit.train.head import CONFIG
from pairkit.train.head_folder import CHECKPOINT, LOG, PLOT, read_config, read_log
from pairkit.train.plot import write_plot

if TYPE_CHECKING:
    import torch

    from pairkit.core.store import Store
    from pairkit.train.config import TrainConfig


@dataclass
class ResumeState:
    """Where a run stands: epochs done, optimizer steps taken, their records, and the
    epochs_done of the folder's config.json (None when it has none), the --epochs the run
    was started with and, for a complete run, the dims of its whitening."""

    epoch: int = 0
    step: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    config_epochs_done: Any = None
    planned: Any = None  # the --epochs the checkpoint was written with
    whitening_dims: Any = None  # of a complete run's output whitening (None: none)


def same(a: Any, b: Any) -> bool:
    """Equal as JSON (tuples and lists alike): how fingerprints are compared."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def differences(saved: Any, now: Any, prefix: str = "") -> list[str]:
    """What differs between two fingerprints, for the refusal: ``name then-value then,
    now-value now`` per option (nested ones as ``loss.keep_input``); the store and the
    pairs by name only (their ids say nothing to a reader). A default changed between
    versions shows here as an option."""
    if not isinstance(saved, dict) or not isinstance(now, dict):
        return [] if same(saved, now) else [prefix.rstrip(".") or "fingerprint"]
    out: list[str] = []
    for key in sorted(set(saved) | set(now)):
        a, b = saved.get(key), now.get(key)
        if same(a, b):
            continue
        name = prefix + key
        if not prefix and key in ("store", "pairs"):
            out.append(f"the {key}")
        elif isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, name + ".")
        else:
            out.append(f"{name} {json.dumps(a)} then, {json.dumps(b)} now")
    return out


def resolved(options: dict[str, Any], in_dim: int) -> dict[str, Any]:
    """``options`` (a fingerprint's) with the head and the relation as they resolve on
    ``in_dim``-dim vectors (:func:`pairkit.train.config.head_spec`; no relation: instance):
    ``--head residual`` or ``--hidden 512`` spelled out is the run of the defaults, and a
    fingerprint written before 2026-12-06 (the options as typed) compares alike. Values
    that are no options (a damaged file) are left as they are, to differ."""
    from dataclasses import replace

    from pairkit.train.config import TrainConfig, head_spec
    from pairkit.train.head import HEAD_KINDS

    d = dict(options)
    head, out_dim, hidden = d.get("head"), d.get("out_dim"), d.get("hidden")
    if head in (None, *HEAD_KINDS) and all(
            v is None or (isinstance(v, int) and not isinstance(v, bool))
            for v in (out_dim, hidden)):
        spec = head_spec(replace(TrainConfig(), head=head, out_dim=out_dim, hidden=hidden),
                         in_dim)
        d.update(head=spec.kind, out_dim=spec.out_dim, hidden=spec.hidden)
    if d.get("relation", "") is None:
        d["relation"] = "instance"
    return d


def fingerprint(cfg: TrainConfig, store: Store, pairs_id: dict[str, Any]) -> dict[str, Any]:
    """What a resumed run must share with the run it continues: every option but those
    that don't change the weights (epochs, device, precision, stop_on_collapse, whiten and
    pair_whitening: the whitenings are fitted after the last epoch), with the head and the
    relation as they resolve (:func:`resolved`), the store's content id, and what
    identifies the pairs."""
    d = resolved(asdict(cfg), store.dim)
    for key in ("epochs", "device", "precision", "stop_on_collapse", "whiten",
                "pair_whitening"):
        d.pop(key)
    d["store"] = store.content_id
    # the table by its content (digest, kind, rows ...), not by the path it was given
    # as: the same file from another folder, or a copy, continues the run
    d["pairs"] = {k: v for k, v in pairs_id.items() if k != "table"}
    return d


def save_checkpoint(out: Path, module: torch.nn.Module, optimizer: Any, scaler: Any,
                    epoch: int, step: int, fingerprint: dict[str, Any], epochs: int) -> None:
    """Write checkpoint.pt atomically. It carries the run's fingerprint and --epochs, so
    ``--resume`` works even when config.json was lost (a kill while writing it)."""
    import torch

    state = {"model": module.state_dict(), "optimizer": optimizer.state_dict(),
             "epoch": epoch, "step": step,
             "scaler": scaler.state_dict() if scaler is not None else {},
             "fingerprint": json.dumps(fingerprint, sort_keys=True), "epochs": epochs}
    with atomic_path(out / CHECKPOINT) as tmp:
        torch.save(state, tmp)


def load_checkpoint(out: Path) -> dict[str, Any]:
    """checkpoint.pt of a head folder (weights only); PairkitError when it is not ours."""
    ckpt = torch_load_weights(out / CHECKPOINT, "--resume:")
    if not isinstance(ckpt, dict) or not {"model", "optimizer", "epoch", "step"} <= set(ckpt):
        raise PairkitError(f"--resume: {out / CHECKPOINT} is not a pairkit checkpoint")
    return ckpt


def load_state(out: Path, ckpt: dict[str, Any], module: torch.nn.Module, optimizer: Any,
               scaler: Any) -> tuple[int, int]:
    """Load the checkpoint ``ckpt`` of ``out`` into ``module``, ``optimizer`` and
    ``scaler``; its ``(epoch, step)``. PairkitError, in one line, when its counts are no
    counts or its states don't fit this run's head (a damaged file)."""
    epoch, step = ckpt["epoch"], ckpt["step"]
    try:
        if not (isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 1
                and isinstance(step, int) and not isinstance(step, bool) and step >= 0):
            raise ValueError(f"epoch {epoch!r} and step {step!r} are no counts")
        module.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if scaler is not None and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise PairkitError(f"--resume: {out / CHECKPOINT} is damaged ({first}): rerun without "
                           "--resume (and with --force)") from None
    return epoch, step


def resume_state(out: Path, cfg: TrainConfig, fingerprint: dict[str, Any],
                 module: torch.nn.Module, optimizer: Any, scaler: Any,
                 note: Callable[[str], None], in_dim: int) -> tuple[ResumeState, bool]:
    """Load ``out``'s checkpoint into ``module``, ``optimizer`` and ``scaler`` and return
    the state with ``True`` when the run was already complete (its config.json says so,
    its plot written from the log if a kill lost it): nothing is left to do, which is
    noted, so that a script can run ``train --resume`` again whether or not the last run
    finished. An unfinished run with ``cfg.epochs`` epochs done is the loop's to finish;
    one with more is refused (UsageError).

    Raises PairkitError when the checkpoint was written with another fingerprint (the
    head's options resolved on ``in_dim``-dim vectors); notes a changed ``--epochs``.
    """
    old = read_config(out)
    ckpt = load_checkpoint(out)
    # the checkpoint's own fingerprint decides (config.json may be missing or lag behind)
    saved = json.loads(ckpt["fingerprint"]) if isinstance(ckpt.get("fingerprint"), str) \
        else old.get("fingerprint")
    if saved is None:
        raise PairkitError(f"--resume: {out} has no {CONFIG} and its checkpoint predates "
                           "fingerprints: rerun with --force")
    if not isinstance(saved, dict):
        raise PairkitError(f"--resume: {out / CHECKPOINT} has a damaged fingerprint: rerun "
                           "with --force")
    if isinstance(saved.get("pairs"), dict):  # runs before 2026-12-06 recorded the path
        saved["pairs"] = {k: v for k, v in saved["pairs"].items() if k != "table"}
    if isinstance(saved.get("store"), str) and isinstance(fingerprint.get("store"), str):
        # the options as typed before 2026-12-06; a fingerprint of another store differs
        # by its store anyway
        saved = resolved(saved, in_dim)
    if not same(saved, fingerprint):
        what = "; ".join(differences(saved, fingerprint)[:4])
        raise PairkitError(f"--resume: {out} was trained with other options, store or pairs "
                           f"({what}); pass the run's options, or rerun without --resume "
                           "(and with --force)")
    epoch, step = load_state(out, ckpt, module, optimizer, scaler)
    state = ResumeState(epoch=epoch, step=step,
                        records=resume_records(out, epoch),
                        config_epochs_done=old.get("epochs_done"))
    was = ckpt.get("epochs", old.get("training", {}).get("epochs"))
    state.planned = was
    complete = old.get("complete") is True and state.config_epochs_done == epoch
    if epoch > cfg.epochs and not complete:
        raise UsageError(f"--resume: --epochs {cfg.epochs} is fewer than the {epoch} epochs "
                         f"{out} has done (of {was}): pass --epochs {epoch} to finish it "
                         "there, or more to train on")
    if complete and epoch >= cfg.epochs:
        white = old.get("whitening")
        state.whitening_dims = white.get("dims") if isinstance(white, dict) else None
        _note_kept_whitening(out, old.get("training"), cfg, note)
        if state.records and not (out / PLOT).exists():  # killed while the plot was written
            note(f"{out}: {PLOT} was missing; written from {LOG}")
            write_plot(out / PLOT, state.records)
            return state, True
        note(f"--resume: {out} already has its {epoch} epochs: nothing to do (pass a "
             "larger --epochs to train on)")
        return state, True
    if was != cfg.epochs and epoch < cfg.epochs:
        note(f"resuming with --epochs {cfg.epochs} (was {was}): the cosine schedule is "
             "stretched")
    return state, False


def resume_records(out: Path, epoch: int) -> list[dict[str, Any]]:
    """The records of ``out``'s log of epochs 1 to ``epoch`` (those of the checkpoint; a
    later one, of an epoch killed before its checkpoint, is dropped). PairkitError, in
    one line, when the log is missing, a line is no record, or an epoch's is missing:
    every checkpoint is written after the log that holds its epochs."""
    try:
        records = read_log(out)
    except ValueError:  # no JSON, no UTF-8
        records = []
    whole = all(isinstance(r, dict) and isinstance(r.get("epoch"), int)
                and not isinstance(r.get("epoch"), bool) for r in records)
    kept = [r for r in records if r["epoch"] <= epoch] if whole else []
    if [r["epoch"] for r in kept] != list(range(1, epoch + 1)):
        raise PairkitError(f"--resume: {out / LOG} is missing or damaged (it should hold the "
                           f"records of the {epoch} epochs of {out / CHECKPOINT}): rerun "
                           "without --resume (and with --force)")
    return kept


def _note_kept_whitening(out: Path, training: Any, cfg: TrainConfig,
                         note: Callable[[str], None]) -> None:
    """Note a ``--whiten`` or ``--pair-whitening`` that differs from a complete run's: its
    whitening was fitted at its last epoch and is kept."""
    if not isinstance(training, dict):
        return
    asked = {"--whiten": cfg.whiten, "--pair-whitening": cfg.pair_whitening}
    then = {"--whiten": training.get("whiten"),
            "--pair-whitening": training.get("pair_whitening")}
    changed = [f"{k} {_option(asked[k])} now, {_option(then[k])} then" for k in asked
               if not same(asked[k], then[k])]
    if changed:
        note(f"--resume: {out} is complete and keeps its whitening ({'; '.join(changed)}): "
             "a whitening is fitted after a run's last epoch; train again with --force to "
             "change it")


def _option(value: Any) -> str:
    """An option's value as typed (None: ``all``, the --pair-whitening default)."""
    return "all" if value is None else str(value)
