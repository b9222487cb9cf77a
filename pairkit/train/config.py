"""The options of a training run (one frozen config), the head they ask for, the
progress hook and what a run returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pairkit.core.devices import PRECISIONS
from pairkit.errors import UsageError
from pairkit.train.data import FN_MODES, RELATIONS
from pairkit.train.head import HEAD_KINDS, RESIDUAL_HIDDEN, HeadSpec
from pairkit.train.losses import LossConfig
from pairkit.train.positives import MINED_VIEWS, SAMPLINGS

DEFAULT_OUT_DIM = 128  # linear and mlp heads
ALL_DIMS = 1 << 30  # the pair whitening's dims when it keeps every direction


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (defaults live here)."""

    head: str | None = None  # None: residual, or mlp when out_dim asks for another dim
    out_dim: int | None = None  # None: the input dim (residual), DEFAULT_OUT_DIM otherwise
    hidden: int | None = None
    loss: LossConfig = field(default_factory=LossConfig)
    fn_mode: str = "eliminate"
    relation: str | None = None
    epochs: int = 10
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 1e-4
    warmup: float = 0.1
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"
    val_fraction: float = 0.0
    stop_on_collapse: bool = False
    positive_share: float = 0.5  # examples whose positive is swapped for a mined one
    positive_sampling: str = "uniform"  # or "confidence": a tie in 3 seeds (benchmarks)
    mined_view: str = "random"  # a mined positive as any view of its source, or "row"
    whiten: float = 0.0  # power of the output whitening (0: none; output_whitening.py)
    # the pair whitening (pair_whitening.py): None every direction (the default, unless
    # --whiten), N the N the negatives differ most along, 0 none
    pair_whitening: int | None = None

    def pair_dims(self) -> int:
        """The pair whitening's dims as fitted: 0 none, ALL_DIMS every direction."""
        if self.pair_whitening is None:
            return 0 if self.whiten else ALL_DIMS
        return self.pair_whitening

    def check(self) -> None:
        """Raise :class:`UsageError` naming the first bad option."""
        self.loss.check()
        if self.head is not None and self.head not in HEAD_KINDS:
            raise UsageError(f"--head must be one of {', '.join(HEAD_KINDS)}, got {self.head}")
        if self.relation is not None and self.relation not in RELATIONS:
            raise UsageError(f"--relation must be one of {', '.join(RELATIONS)}, "
                             f"got {self.relation}")
        if self.epochs < 1:
            raise UsageError(f"--epochs must be >= 1, got {self.epochs}")
        if not 0 <= self.seed < 2**63:  # torch's seed is a 64-bit integer
            raise UsageError(f"--seed must be in [0, 2**63), got {self.seed}")
        if self.batch_size < 2:
            raise UsageError(f"--batch-size must be >= 2, got {self.batch_size}")
        if not self.lr > 0:
            raise UsageError(f"--lr must be > 0, got {self.lr}")
        if not self.weight_decay >= 0:
            raise UsageError(f"--weight-decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.warmup < 1:
            raise UsageError(f"--warmup must be in [0, 1), got {self.warmup}")
        if self.fn_mode not in FN_MODES:
            raise UsageError(f"--fn-mode must be one of {', '.join(FN_MODES)}, "
                             f"got {self.fn_mode}")
        if self.precision not in PRECISIONS:
            raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}, "
                             f"got {self.precision}")
        if not 0 <= self.val_fraction < 1:
            raise UsageError(f"--val-fraction must be in [0, 1), got {self.val_fraction}")
        if not 0 <= self.positive_share <= 1:
            raise UsageError(f"--positive-share must be in [0, 1], got {self.positive_share}")
        if self.positive_sampling not in SAMPLINGS:
            raise UsageError(f"--positive-sampling must be one of {', '.join(SAMPLINGS)}, "
                             f"got {self.positive_sampling}")
        if self.mined_view not in MINED_VIEWS:
            raise UsageError(f"--mined-view must be one of {', '.join(MINED_VIEWS)}, "
                             f"got {self.mined_view}")
        if not 0 <= self.whiten <= 0.5:
            raise UsageError(f"--whiten must be in [0, 0.5] (0: none, 0.5: full whitening), "
                             f"got {self.whiten}")
        if self.pair_whitening is not None and self.pair_whitening < 0:
            raise UsageError(f"--pair-whitening must be all or >= 0 (0: none), got "
                             f"{self.pair_whitening}")
        if self.head == "linear" and self.hidden is not None:
            raise UsageError("--hidden applies to residual and mlp heads, not linear")
        if self.pair_whitening and self.whiten:
            raise UsageError("--whiten and --pair-whitening are two whitenings of the same "
                             "outputs: give one")


def check_table_options(cfg: TrainConfig, has_table: bool) -> None:
    """UsageError for an option set away from its default that only a pair table's rows
    feed (mined positives, false-negative flags) on a run without one."""
    if has_table:
        return
    default = TrainConfig()
    for attr, flag in (("positive_share", "--positive-share"),
                       ("positive_sampling", "--positive-sampling"),
                       ("mined_view", "--mined-view")):
        if getattr(cfg, attr) != getattr(default, attr):
            raise UsageError(f"{flag} applies to a --pairs table's mined positives, and this "
                             "run has no table")
    if cfg.fn_mode != default.fn_mode:
        raise UsageError("--fn-mode applies to a --pairs table's false_negative flags, and "
                         "this run has no table")


def check_head_dims(cfg: TrainConfig, in_dim: int) -> None:
    """UsageError when the head ``cfg`` asks for can't be had on ``in_dim``-dim vectors (a
    residual head with another ``--out-dim``; a ``--pair-whitening`` of more dims than
    the head outputs): told from the store's manifest, before its vectors load."""
    spec = head_spec(cfg, in_dim)
    if spec.kind == "residual" and spec.out_dim != in_dim:
        raise UsageError(f"a residual head keeps the input dim ({in_dim}): "
                         f"--out-dim {spec.out_dim} needs --head mlp or linear")
    if cfg.pair_whitening is not None and cfg.pair_whitening > spec.out_dim:
        raise UsageError(f"--pair-whitening {cfg.pair_whitening} is more than the head's "
                         f"{spec.out_dim} output dims: give {spec.out_dim} or fewer, or all")


def check_whitening_memory(cfg: TrainConfig, out_dim: int) -> None:
    """UsageError when the pair whitening ``cfg`` asks for (on by default) of the head's
    ``out_dim`` outputs needs more memory than the host has available
    (:func:`pairkit.train.pair_whitening.fit_memory`, :func:`pairkit.core.memory
    .available_memory`): it is fitted after the last epoch, and running out there would
    come after the whole training."""
    from pairkit.core.memory import available_memory
    from pairkit.train.pair_whitening import fit_memory

    dims = cfg.pair_dims()
    if not dims:
        return
    need = fit_memory(out_dim, dims)
    available = available_memory()
    if available is None or need <= available:
        return
    flag = ("--pair-whitening all (the default)" if cfg.pair_whitening is None else
            f"--pair-whitening {cfg.pair_whitening}")
    raise UsageError(f"{flag} of the head's {out_dim:,} output dims needs about "
                     f"{need / 2**30:,.1f} GiB of memory ({out_dim:,} x {out_dim:,} matrices) "
                     f"and {available / 2**30:,.1f} GiB is available: lower --out-dim, or "
                     "pass --pair-whitening 0 (none)")


def head_spec(cfg: TrainConfig, in_dim: int) -> HeadSpec:
    """The head architecture ``cfg`` asks for on ``in_dim``-dim vectors (defaults filled in)."""
    kind = cfg.head or ("residual" if cfg.out_dim in (None, in_dim) else "mlp")
    if kind == "residual":
        return HeadSpec("residual", in_dim, in_dim if cfg.out_dim is None else cfg.out_dim,
                        cfg.hidden or RESIDUAL_HIDDEN)
    out_dim = DEFAULT_OUT_DIM if cfg.out_dim is None else cfg.out_dim
    return HeadSpec(kind, in_dim, out_dim, (cfg.hidden or in_dim) if kind == "mlp" else None)


class TrainHook(Protocol):
    """Progress callbacks (the CLI draws a bar; tests may interrupt)."""

    def start(self, total: int, description: str) -> None: ...

    def advance(self, pairs: int, loss: float, epoch: int) -> None: ...

    def epoch_done(self, record: dict[str, Any]) -> None: ...

    def note(self, message: str) -> None: ...


@dataclass
class TrainResult:
    """What a run did: per-epoch records, where, how, and why it stopped (None = finished)."""

    head: Path
    records: list[dict[str, Any]]
    device: str
    precision: str
    streaming: bool
    examples: int
    stopped: str | None = None
    notes: list[str] = field(default_factory=list)
    out_dim: int = 0  # of Head.apply's rows: the whitening's when whitened
    module_dim: int = 0  # of the module's outputs
    whitened: bool = False
    whitening_skipped: str | None = None  # why the output whitening was not fitted
    head_kind: str = ""
    mined_positives: int = 0  # of the table, on the training side
    trained: bool = True  # False: --resume found the run complete, nothing was trained

    @property
    def pairs_per_second(self) -> float:
        """Training pairs per second over every epoch of the records (not the last only)."""
        seconds = sum(r["seconds"] for r in self.records)
        pairs = sum(r.get("pairs", self.examples) for r in self.records)
        return pairs / seconds if seconds > 0 else 0.0
