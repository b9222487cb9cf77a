"""The end of an epoch: the evaluation metrics (alignment and uniformity from
:mod:`pairkit.eval.geometry`), the collapse guard, the epoch's record, and the
epoch's files written into the head folder."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.errors import PairkitError
from pairkit.eval.geometry import all_pairs_uniformity, pair_alignment
from pairkit.train.data import PairArrays
from pairkit.train.epoch import (
    Autocast,
    DeviceData,
    batches,
    forward,
    make_autocast,
    overflow_hint,
)
from pairkit.train.head import CONFIG, WEIGHTS, save_weights, write_config
from pairkit.train.head_folder import CHECKPOINT, LOG, write_log
from pairkit.train.losses import batch_loss
from pairkit.train.losses.candidates import build_candidates
from pairkit.train.output_whitening import FILE as WHITENING_FILE
from pairkit.train.output_whitening import (
    VARIANCE,
    Whitening,
    fit_output_whitening,
    save_output_whitening,
)
from pairkit.train.resume import save_checkpoint

if TYPE_CHECKING:
    import torch

    from pairkit.train.config import TrainConfig
    from pairkit.train.run_pairs import RunPairs

# Collapse bounds: mean per-dimension std of the normalised outputs times sqrt(out_dim)
# (about 1 for points spread over the sphere, 0 when collapsed), and the uniformity of
# Wang & Isola 2020 (log E exp(-2 |x - y|^2): -4 when spread, 0 when collapsed).
COLLAPSE_STD = 0.02
COLLAPSE_UNIFORMITY = -0.1
EVAL_ITEMS = 2048
# pairs of the metrics without --val-fraction: one more forward pass each (anchor, positive,
# negatives); at 8,192 it cost a quarter of a run on an 8,000-row store (docs/benchmarks.md)
EVAL_PAIRS = 2048


def dim_std(z: np.ndarray) -> float:
    """Mean per-dimension std of rows ``z`` (n, d) times sqrt(d): ~1 spread, 0 collapsed."""
    if len(z) < 2:
        return float("nan")
    return float(z.std(axis=0).mean() * math.sqrt(z.shape[1]))


# the validation side's uniformity and dim std judge collapse only over this many positive
# groups (sources, under instance): over fewer, one thing's near-identical views weigh in
# so much that a healthy head reads as collapsed
MIN_GEOMETRY_GROUPS = 8


def eval_items(val_mask: np.ndarray, cfg: TrainConfig, groups: np.ndarray | None = None,
               note: Callable[[str], None] | None = None) -> tuple[np.ndarray, str]:
    """The store rows whose projections the uniformity and dim std are measured on (the
    validation sources', else the training ones'; a seeded sample of at most EVAL_ITEMS)
    and which side that is (``val`` or ``train``). Validation sources of fewer than
    :data:`MIN_GEOMETRY_GROUPS` positive ``groups`` give the training side's rows, said to
    ``note`` (the loss and the gap stay the validation pairs')."""
    on_val = cfg.val_fraction > 0
    if on_val and groups is not None:
        n_groups = len(np.unique(groups[val_mask]))
        if n_groups < MIN_GEOMETRY_GROUPS:
            on_val = False
            if note is not None:
                note(f"--val-fraction {cfg.val_fraction:g} holds out {n_groups} positive "
                     f"groups, under the {MIN_GEOMETRY_GROUPS} the uniformity and dim std "
                     "judge collapse by: they are measured on the training items")
    items = np.flatnonzero(val_mask if on_val else ~val_mask)
    if len(items) > EVAL_ITEMS:
        items = np.sort(np.random.default_rng([cfg.seed, 31]).choice(
            items, EVAL_ITEMS, replace=False))
    return items, "val" if cfg.val_fraction > 0 else "train"


def eval_pairs(pairs: RunPairs, epoch_pairs: PairArrays, cfg: TrainConfig) -> PairArrays:
    """The pairs the evaluation loss and scores are measured on: the validation pairs,
    else the epoch's first EVAL_PAIRS."""
    if cfg.val_fraction > 0:
        return pairs.val
    return epoch_pairs.subset(np.arange(min(len(epoch_pairs), EVAL_PAIRS)))


def evaluate(module: torch.nn.Module, data: DeviceData, pairs: PairArrays, items: np.ndarray,
             cfg: TrainConfig, autocast: Autocast) -> dict[str, float]:
    """Loss, mean positive/negative cosine and their gap, alignment, uniformity, dim std."""
    import torch

    module.eval()
    losses, weights = [], []
    pos_sum = neg_sum = 0.0
    pos_n = neg_n = 0
    za_all, zp_all = [], []
    with torch.no_grad():
        for start, stop in batches(len(pairs), cfg.batch_size):
            rows = np.arange(start, stop)
            za, zp, zn, valid, attract, groups, neg_groups, xa, ids = forward(
                module, data, pairs, rows, autocast, with_negatives=cfg.loss.name == "supcon")
            loss = batch_loss(cfg.loss, za, zp, zn, valid, attract, groups, neg_groups, xa,
                              rows=ids)
            losses.append(float(loss))
            weights.append(stop - start)
            scores, pos, neg = build_candidates(za, zp, zn, valid, attract, groups)
            pos_sum += float(scores[pos].sum())
            pos_n += int(pos.sum())
            neg_sum += float(scores[neg].sum())
            neg_n += int(neg.sum())
            za_all.append(za.cpu().numpy())
            zp_all.append(zp.cpu().numpy())
    z = row_outputs(module, data, items, autocast)
    module.train()
    pos_score = pos_sum / max(pos_n, 1)
    neg_score = neg_sum / neg_n if neg_n else float("nan")
    return {
        "eval_loss": float(np.average(losses, weights=weights)) if losses else float("nan"),
        "pos_score": pos_score,
        "neg_score": neg_score,
        "gap": pos_score - neg_score,
        "alignment": pair_alignment(np.concatenate(za_all), np.concatenate(zp_all)),
        "uniformity": all_pairs_uniformity(z),
        "dim_std": dim_std(z),
    }


def row_outputs(module: torch.nn.Module, data: DeviceData, rows: np.ndarray,
                autocast: Autocast) -> np.ndarray:
    """The module's L2-normalised outputs (float32, (len(rows), out)) on the store
    ``rows``, 4096 at a time, without gradients ((0, 1) for no rows)."""
    import torch

    parts = []
    with torch.no_grad():
        for start in range(0, len(rows), 4096):
            x = data.rows(data.ids(rows[start : start + 4096]))
            with autocast():
                z = module(x)
            parts.append(torch.nn.functional.normalize(z.float(), dim=1).cpu().numpy())
    return np.concatenate(parts) if parts else np.zeros((0, 1), np.float32)


def epoch_record(epoch: int, loss_sum: float, n_pairs: int, lr: float, seconds: float,
                 metrics_on: str, metrics: dict[str, float]) -> dict[str, Any]:
    """The log record of 0-based ``epoch`` (its ``collapsed`` flag from the bounds)."""
    collapsed = (metrics["dim_std"] < COLLAPSE_STD
                 or metrics["uniformity"] > COLLAPSE_UNIFORMITY)
    return {"epoch": epoch + 1, "loss": loss_sum / n_pairs, "lr": lr,
            "seconds": round(seconds, 4), "pairs": n_pairs, "pairs_per_s": n_pairs / seconds,
            "metrics_on": metrics_on, **metrics, "collapsed": bool(collapsed)}


def check_outputs_finite(metrics: dict[str, float], epoch: int, cfg: TrainConfig,
                         precision: str) -> None:
    """PairkitError when the head's outputs after 0-based ``epoch`` are not finite (its
    uniformity and dim std, computed from them, are NaN): a step can leave the weights
    NaN or overflowing behind a finite training loss, and such a head must not be saved."""
    if all(math.isfinite(metrics[k]) for k in ("uniformity", "dim_std")):
        return
    raise PairkitError(
        f"the head's outputs are not finite after epoch {epoch + 1}: likely causes: "
        f"--temperature too low ({cfg.loss.temperature}), --lr too high ({cfg.lr})"
        + overflow_hint(precision) + f"; epoch {epoch + 1} was not saved")


def collapse_note(record: dict[str, Any], stop_on_collapse: bool) -> str:
    """The note of a collapsed epoch: what was measured and what to change."""
    crossed = []
    if record["dim_std"] < COLLAPSE_STD:
        crossed.append(f"dim std {record['dim_std']:.3f} < {COLLAPSE_STD}")
    if record["uniformity"] > COLLAPSE_UNIFORMITY:
        crossed.append(f"uniformity {record['uniformity']:.3f} > {COLLAPSE_UNIFORMITY}")
    return (f"epoch {record['epoch']}: embeddings look collapsed ({' and '.join(crossed)}): "
            "lower --lr, raise --temperature"
            + ("" if stop_on_collapse else ", or pass --stop-on-collapse"))


MIN_ROWS_PER_DIM = 2
# the pair whitening centres the outputs on the training rows' mean: N centred rows have
# a mean cosine of -1 / (N - 1) (two rows: opposite), so it needs this many; its C_S is
# shrunk towards the identity, full rank whatever the number of pairs
MIN_CENTRED_ROWS = 32


def output_whitening(module: torch.nn.Module, data: DeviceData, rows: np.ndarray,
                     power: float, out_dim: int) -> Whitening | None:
    """The partial whitening of the head's outputs on the store ``rows`` (the training
    rows of :func:`pairkit.train.output_whitening.fit_rows`), computed in float32 as
    :meth:`Head.apply` projects; None when ``power`` is 0 or there are fewer than
    :data:`MIN_ROWS_PER_DIM` rows per dim of the module's outputs (``out_dim``): a
    covariance of fewer rows is too noisy to scale its small directions up."""
    if power == 0 or len(rows) < MIN_ROWS_PER_DIM * out_dim:
        return None
    return fit_output_whitening(eval_outputs(module, data, rows), power)


def eval_outputs(module: torch.nn.Module, data: DeviceData, rows: np.ndarray) -> np.ndarray:
    """:func:`row_outputs` of the store ``rows`` in eval mode and full precision (as
    :meth:`Head.apply` projects), the module's mode restored after: what a whitening is
    fitted on."""
    was_training = module.training
    module.eval()
    z = row_outputs(module, data, rows, make_autocast(data.device, None))
    module.train(was_training)
    return z


def pair_whitening(module: torch.nn.Module, data: DeviceData, pairs: Any,
                   rows: np.ndarray, dims: int, seed: int, out_dim: int) -> Whitening | None:
    """The learned whitening of the head's outputs from the training table's pairs
    (:mod:`pairkit.train.pair_whitening`; ``pairs``: the run's
    :class:`~pairkit.train.run_pairs.RunPairs`, ``rows`` the training rows whose outputs'
    mean centres it); None when ``dims`` is 0, with fewer than :data:`MIN_CENTRED_ROWS`
    training rows, when there is no positive pair (or, rotated to fewer
    dims than the outputs have, no negative pair) or its positives do not differ. A run
    without a table takes its relation's pairs
    (:func:`pairkit.train.pair_whitening.relation_pairs`)."""
    from pairkit.train.pair_whitening import (
        fit_pair_whitening,
        relation_pairs,
        training_pairs,
    )

    if dims == 0 or len(rows) < MIN_CENTRED_ROWS:
        return None  # too few rows: centred, two rows would make a source's views opposite
    t, mined = pairs.train, pairs.mined
    if t is None:
        pos, neg = relation_pairs(pairs.groups, ~pairs.val_mask, seed)
    else:
        pos, neg = training_pairs(t.anchor, t.positive, t.negatives, t.neg_attract,
                                  None if mined is None else mined.offsets,
                                  None if mined is None else mined.ids, ~pairs.val_mask, seed)
    if not len(pos) or (not len(neg) and dims < out_dim):
        return None
    ids = np.unique(np.concatenate([pos.ravel(), neg.ravel(), rows]))
    z = eval_outputs(module, data, ids)
    mean = z[np.searchsorted(ids, rows)].mean(axis=0)
    try:
        return fit_pair_whitening(z, np.searchsorted(ids, pos), np.searchsorted(ids, neg),
                                  mean, dims=dims)
    except ValueError:  # the positives do not differ (fit_pair_whitening)
        return None


def fitted_whitening(module: torch.nn.Module, data: DeviceData, pairs: Any,
                     rows: np.ndarray, cfg: Any, out_dim: int) -> Whitening | None:
    """The whitening ``cfg`` asks for (``--whiten``: PCA; ``--pair-whitening``: learned
    from the pairs), fitted on the last epoch's outputs; None for none."""
    if cfg.pair_dims():
        return pair_whitening(module, data, pairs, rows, cfg.pair_dims(), cfg.seed, out_dim)
    return output_whitening(module, data, rows, cfg.whiten, out_dim)


def whitening_record(whitening: Whitening | None, cfg: Any, rows: int
                     ) -> dict[str, Any] | None:
    """config.json's ``whitening`` entry (None: no whitening)."""
    if whitening is None:
        return None
    dims = int(whitening[1].shape[1])
    if cfg.pair_dims():
        from pairkit.train.pair_whitening import SHRINK

        return {"kind": "pairs", "shrink": SHRINK, "dims": dims, "rows": int(rows)}
    return {"kind": "pca", "power": cfg.whiten, "variance": VARIANCE, "dims": dims,
            "rows": int(rows)}


def save_epoch(out: Path, module: torch.nn.Module, optimizer: Any, scaler: Any,
               records: list[dict[str, Any]], step: int, fingerprint: dict[str, Any],
               epochs: int, config: dict[str, Any], whitening: Whitening | None) -> None:
    """Write the epoch into the head folder, each file atomically: the weights, the output
    whitening (or none), the log, the checkpoint (after ``records[-1]["epoch"]`` epochs and
    ``step`` steps), config.json (last: what a reader trusts).

    The first save of a new run (no checkpoint.pt, no config.json yet) that fails removes
    the files it wrote: a new run that fails in its first epoch leaves no head behind."""
    out.mkdir(parents=True, exist_ok=True)
    first = not (out / CHECKPOINT).exists() and not (out / CONFIG).exists()
    try:
        save_weights(out, module)
        save_whitening_file(out, whitening)
        write_log(out, records)
        save_checkpoint(out, module, optimizer, scaler, records[-1]["epoch"], step,
                        fingerprint, epochs)
        write_config(out, config)
    except BaseException:
        if first:
            for name in (CONFIG, CHECKPOINT, WEIGHTS, WHITENING_FILE, LOG):
                with contextlib.suppress(OSError):
                    (out / name).unlink()
        raise


def save_whitening_file(out: Path, whitening: Whitening | None) -> None:
    """Write the head's ``whitening.safetensors``, or remove a stale one."""
    if whitening is None:
        (out / WHITENING_FILE).unlink(missing_ok=True)
    else:
        save_output_whitening(out, *whitening)
