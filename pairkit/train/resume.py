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
from pairkit.errors import PairkitError
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
    epochs_done of the folder's config.json (None when it has none)."""

    epoch: int = 0
    step: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    config_epochs_done: Any = None


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


def fingerprint(cfg: TrainConfig, store: Store, pairs_id: dict[str, Any]) -> dict[str, Any]:
    """What a resumed run must share with the run it continues: every option but those
    that don't change the weights (epochs, device, precision, stop_on_collapse, whiten and
    pair_whitening: the whitenings are fitted after the last epoch), the store's content
    id, and
    what identifies the pairs."""
    d = asdict(cfg)
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


def resume_state(out: Path, cfg: TrainConfig, fingerprint: dict[str, Any],
                 module: torch.nn.Module, optimizer: Any, scaler: Any,
                 note: Callable[[str], None]) -> tuple[ResumeState, bool]:
    """Load ``out``'s checkpoint into ``module``, ``optimizer`` and ``scaler`` and return
    the state with ``True`` when the run was already complete (its plot written from the
    log if a kill lost it): nothing is left to do, which is noted, so that a script can
    run ``train --resume`` again whether or not the last run finished.

    Raises PairkitError when the checkpoint was written with another fingerprint; notes a
    changed ``--epochs``.
    """
    old = read_config(out)
    ckpt = load_checkpoint(out)
    # the checkpoint's own fingerprint decides (config.json may be missing or lag behind)
    saved = json.loads(ckpt["fingerprint"]) if isinstance(ckpt.get("fingerprint"), str) \
        else old.get("fingerprint")
    if saved is None:
        raise PairkitError(f"--resume: {out} has no {CONFIG} and its checkpoint predates "
                           "fingerprints: rerun with --force")
    if isinstance(saved.get("pairs"), dict):  # runs before 2026-12-06 recorded the path
        saved["pairs"] = {k: v for k, v in saved["pairs"].items() if k != "table"}
    if not same(saved, fingerprint):
        what = "; ".join(differences(saved, fingerprint)[:4])
        raise PairkitError(f"--resume: {out} was trained with other options, store or pairs "
                           f"({what}); pass the run's options, or rerun without --resume "
                           "(and with --force)")
    module.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    if scaler is not None and ckpt.get("scaler"):
        scaler.load_state_dict(ckpt["scaler"])
    epoch, step = int(ckpt["epoch"]), int(ckpt["step"])
    state = ResumeState(epoch=epoch, step=step,
                        records=[r for r in read_log(out) if r["epoch"] <= epoch],
                        config_epochs_done=old.get("epochs_done"))
    was = ckpt.get("epochs", old.get("training", {}).get("epochs"))
    if epoch >= cfg.epochs and state.config_epochs_done == epoch:
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
