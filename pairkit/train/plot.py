"""The per-epoch plot of a head folder (train_plot.png), the name of its evaluation loss and
the gap as the epoch lines and the summary write it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pairkit.core.atomic import atomic_path


def eval_loss_name(metrics_on: str) -> str:
    """What the per-epoch evaluation loss was measured on, for the epoch line and plot."""
    return "validation loss" if metrics_on == "val" else "train-pair loss after the epoch"


def gap_text(gap: float | None) -> str:
    """The score gap for the epoch line and the summary: ``0.123``, or ``n/a (no
    negatives)`` where there was no negative to measure it by (NaN; null in the log)."""
    if isinstance(gap, (int, float)) and math.isfinite(gap):
        return f"{gap:.3f}"
    return "n/a (no negatives)"


def write_plot(path: Path, records: list[dict[str, Any]]) -> None:
    """Loss, score gap and alignment/uniformity per epoch as a PNG (Agg, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    epochs = [r["epoch"] for r in records]

    def col(key: str) -> list[float]:
        return [float("nan") if r.get(key) is None else r[key] for r in records]

    fig = Figure(figsize=(11, 3.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 3, 1)
    ax.plot(epochs, col("loss"), marker="o", label="training loss (mean over the epoch)")
    ax.plot(epochs, col("eval_loss"), marker="o",
            label=eval_loss_name(records[-1]["metrics_on"]))
    ax.set_xlabel("epoch")
    ax.legend()
    ax = fig.add_subplot(1, 3, 2)
    ax.plot(epochs, col("pos_score"), marker="o", label="positive cos")
    ax.plot(epochs, col("neg_score"), marker="o", label="negative cos")
    ax.plot(epochs, col("gap"), marker="o", label="gap")
    ax.set_xlabel("epoch")
    ax.legend()
    ax = fig.add_subplot(1, 3, 3)
    ax.plot(epochs, col("alignment"), marker="o", label="alignment")
    ax.plot(epochs, col("uniformity"), marker="o", label="uniformity")
    ax.set_xlabel("epoch")
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
