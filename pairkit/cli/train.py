"""pairkit train: a contrastive head on a store's embeddings."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import typer

from pairkit.cli.common import say, user_errors
from pairkit.cli.options import FnMode, device_option
from pairkit.cli.progress import ProgressBar


class _TrainBar(ProgressBar):
    """Progress bar on stderr: pairs done, pairs/s, current epoch and loss."""

    def __init__(self, quiet: bool) -> None:
        super().__init__(quiet, unit="pairs")
        self.quiet = quiet

    def advance(self, pairs: int, loss: float, epoch: int) -> None:  # type: ignore[override]
        super().advance(pairs, description=f"epoch {epoch} loss {loss:.4f}")

    def epoch_done(self, record: dict[str, Any]) -> None:
        if self.quiet:
            return
        from pairkit.train.plot import eval_loss_name, gap_text

        self.print(f"epoch {record['epoch']}: loss {record['loss']:.4f} (mean over the "
                   f"epoch), {eval_loss_name(record['metrics_on'])} {record['eval_loss']:.4f}, "
                   f"gap {gap_text(record['gap'])}, alignment {record['alignment']:.3f}, "
                   f"uniformity {record['uniformity']:.3f}, "
                   f"{record['pairs_per_s']:,.0f} pairs/s")


def train(
    store: str = typer.Argument(..., help="Store folder or URL (from embed or import)."),
    output: Path = typer.Option(..., "-o", "--output", help="Head folder to create."),
    pairs: str | None = typer.Option(
        None, "--pairs", "-p", help="Pair table from mine (triplet or n-tuple; - = stdin)."),
    relation: str | None = typer.Option(
        None, "--relation", show_default="instance with --pairs, none without",
        help="instance or label: positives from the store, in-batch negatives (no table); with "
        "--pairs: which in-batch items are not negatives."),
    head: Literal["residual", "linear", "mlp"] | None = typer.Option(
        None, "--head", help="Head architecture; residual: the input plus a learned "
        "correction, identity at start (docs/train.md).",
        show_default="residual; mlp with an --out-dim other than the input dim"),
    out_dim: int | None = typer.Option(None, "--out-dim", help="Output dimension of the head.",
                                       show_default="the input dim (residual), 128"),
    hidden: int | None = typer.Option(None, "--hidden", help="Hidden width (residual, mlp).",
                                      show_default="512 (residual), the input dim (mlp)"),
    loss: Literal["infonce", "triplet", "supcon", "debiased", "hard"] = typer.Option(
        "infonce", "--loss", help="Contrastive loss (docs/methods.md)."),
    temperature: float = typer.Option(
        0.1, "--temperature", help="Softmax temperature (every loss but triplet; --keep-input)."),
    symmetric: bool = typer.Option(False, "--symmetric",
                                   help="NT-Xent over both views (infonce, debiased, hard)."),
    margin: float = typer.Option(0.2, "--margin", help="Triplet margin on cosine distance."),
    tau_plus: float = typer.Option(0.1, "--tau-plus",
                                   help="Class prior for debiasing (debiased, hard)."),
    beta: float = typer.Option(1.0, "--beta", help="Hardness concentration (hard)."),
    fn_mode: FnMode = typer.Option(
        "eliminate", "--fn-mode",
        help="Rows flagged false_negative: eliminate (out of the denominator), attract (as "
        "positives) or keep (as negatives)."),
    positive_share: float = typer.Option(
        0.5, "--positive-share", help="Share of examples whose positive is, each epoch, one of "
        "the anchor's mined positives (rows positive_kind=mined of the table) instead of its "
        "other view; 0 ignores mined positives."),
    positive_sampling: Literal["uniform", "confidence"] = typer.Option(
        "uniform", "--positive-sampling", help="How a mined positive is drawn: uniformly, or "
        "in proportion to its positive_confidence."),
    mined_view: Literal["random", "row"] = typer.Option(
        "random", "--mined-view", help="A mined positive as any view of its source, drawn "
        "each epoch (random), or as the row mine named (row)."),
    whiten: float = typer.Option(
        0.0, "--whiten", help="Power of a partial PCA whitening of the head's outputs, fitted "
        "on the training rows (0: none; 0.25: kNN up, MAP@R down; 0.5: full whitening)."),
    pair_whitening: str = typer.Option(
        "all", "--pair-whitening", metavar="<all|dims>", help="Whiten the head's outputs by "
        "what its positive pairs differ by (the table's, or the relation's): all directions "
        "(all; kNN and MAP@R up), the <dims> its negatives differ most along, or none (0). "
        "Off with --whiten."),
    keep_input: float = typer.Option(0.5, "--keep-input", metavar="<weight>", help="Weight "
                                     "of keeping the input's neighbour order (0: off)."),
    keep_input_temperature: float = typer.Option(
        0.05, "--keep-input-temperature", help="The input's temperature in --keep-input."),
    epochs: int = typer.Option(10, "--epochs", help="Passes over the pairs."),
    batch_size: int = typer.Option(256, "--batch-size", help="Pairs per batch."),
    lr: float = typer.Option(1e-3, "--lr", help="Peak learning rate (AdamW)."),
    weight_decay: float = typer.Option(1e-4, "--weight-decay", help="AdamW weight decay."),
    warmup: float = typer.Option(0.1, "--warmup", help="Fraction of steps of linear warmup."),
    seed: int = typer.Option(0, "--seed", help="Seed of init, shuffling, split, sampling."),
    device: str = device_option("Where the head trains; auto: cuda when torch sees a GPU."),
    precision: Literal["auto", "fp32", "fp16", "bf16"] = typer.Option(
        "auto", "--precision", help="Autocast precision; auto: fp16 on CUDA, fp32 on CPU."),
    val_fraction: float = typer.Option(
        0.0, "--val-fraction", help="Fraction of sources held out for validation."),
    stop_on_collapse: bool = typer.Option(False, "--stop-on-collapse",
                                          help="Stop when the embeddings collapse."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the last checkpoint."),
    force: bool = typer.Option(False, "--force", help="Replace an existing head."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress or per-epoch lines."),
    json_out: bool = typer.Option(False, "--json", help="Print the last epoch as JSON."),
) -> None:
    """Train a projection head on frozen embeddings with a contrastive loss.

    Example: pairkit mine store --hard -o - | pairkit train store --pairs - -o head
    """
    from pairkit.core.options import parse_all_or_int
    from pairkit.train.command import train_to_files
    from pairkit.train.config import TrainConfig
    from pairkit.train.head_folder import json_record
    from pairkit.train.losses import LossConfig

    with user_errors():
        cfg = TrainConfig(
            head=head, out_dim=out_dim, hidden=hidden,
            loss=LossConfig(name=loss, temperature=temperature, symmetric=symmetric,
                            margin=margin, tau_plus=tau_plus, beta=beta, keep_input=keep_input,
                            keep_input_temperature=keep_input_temperature),
            fn_mode=fn_mode, relation=relation, epochs=epochs, batch_size=batch_size, lr=lr,
            weight_decay=weight_decay, warmup=warmup, seed=seed, device=device,
            precision=precision, val_fraction=val_fraction, stop_on_collapse=stop_on_collapse,
            positive_share=positive_share, positive_sampling=positive_sampling,
            mined_view=mined_view, whiten=whiten,
            pair_whitening=parse_all_or_int(pair_whitening, "--pair-whitening"),
        )
        bar = _TrainBar(quiet)
        try:
            result = train_to_files(store, output, cfg, pairs=pairs, resume=resume,
                                    force=force, hook=bar)
        finally:
            bar.stop()
        last = result.records[-1]
        if json_out:
            typer.echo(json_record(last))
        from pairkit.core.manifest import read_manifest
        from pairkit.train.command import check_collapse, summary_line

        check_collapse(result, output)
        say(summary_line(result, read_manifest(store)["dim"], loss, output), quiet)
