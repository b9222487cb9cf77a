"""The training loop: AdamW, cosine schedule with warmup, per-epoch validation,
collapse guard, atomic per-epoch checkpoints, resume.

The store's vectors are loaded once (onto the GPU when they fit, else kept in
host memory and each batch copied over); a batch is an index gather of the
rows of its anchors, positives and mined negatives.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pairkit import __version__
from pairkit.core.atomic import atomic_open, atomic_path, remove_stale_temps
from pairkit.core.devices import PRECISIONS, autocast_dtype, resolve_device, resolve_precision
from pairkit.core.integrity import read_json_file
from pairkit.core.lock import LOCK_NAME, writer_lock
from pairkit.core.safe_load import torch_load_weights
from pairkit.errors import PairkitError, UsageError
from pairkit.eval.geometry import all_pairs_uniformity, pair_alignment
from pairkit.eval.split import split_by_source
from pairkit.train.data import (
    FN_MODES,
    PairArrays,
    TableInfo,
    pairs_from_table,
    relation_groups,
    restrict,
    sample_relation_pairs,
    table_kind,
)
from pairkit.train.head import (
    CONFIG,
    HEAD_FORMAT,
    HEAD_FORMAT_VERSION,
    RESIDUAL_HIDDEN,
    WEIGHTS,
    HeadSpec,
    build_module,
    save_weights,
    spec_dict,
    write_config,
)
from pairkit.train.losses import LossConfig, batch_loss
from pairkit.train.losses.candidates import build_candidates
from pairkit.train.positives import (
    SAMPLINGS,
    PositiveSets,
    concat_pairs,
    mined_only_examples,
    positive_sets,
    split_mined_rows,
    swap_positives,
)

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from pairkit.core.store import Store

CHECKPOINT = "checkpoint.pt"
LOG = "train_log.jsonl"
PLOT = "train_plot.png"
HEAD_FILES = (WEIGHTS, CONFIG, LOG, PLOT, CHECKPOINT)
# Collapse bounds: mean per-dimension std of the normalised outputs times sqrt(out_dim)
# (about 1 for points spread over the sphere, 0 when collapsed), and the uniformity of
# Wang & Isola 2020 (log E exp(-2 |x - y|^2): -4 when spread, 0 when collapsed).
COLLAPSE_STD = 0.02
COLLAPSE_UNIFORMITY = -0.1
EVAL_ITEMS = 2048
EVAL_PAIRS = 8192
DEVICE_FRACTION = 0.5
DEFAULT_OUT_DIM = 128  # linear and mlp heads


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
    positive_sampling: str = "uniform"

    def check(self) -> None:
        """Raise :class:`PairkitError` naming the first bad option."""
        self.loss.check()
        if self.epochs < 1:
            raise UsageError(f"--epochs must be >= 1, got {self.epochs}")
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
    out_dim: int = 0
    head_kind: str = ""
    mined_positives: int = 0  # of the table, on the training side

    @property
    def pairs_per_second(self) -> float:
        """Training pairs per second over every epoch of the records (not the last only)."""
        seconds = sum(r["seconds"] for r in self.records)
        pairs = sum(r.get("pairs", self.examples) for r in self.records)
        return pairs / seconds if seconds > 0 else 0.0


def lr_at(step: int, total: int, warmup: int, lr: float) -> float:
    """Learning rate at optimizer ``step`` (0-based): linear warmup, then cosine to 0."""
    if step < warmup:
        return lr * (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min((step - warmup) / span, 1.0)
    return lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def dim_std(z: np.ndarray) -> float:
    """Mean per-dimension std of rows ``z`` (n, d) times sqrt(d): ~1 spread, 0 collapsed."""
    if len(z) < 2:
        return float("nan")
    return float(z.std(axis=0).mean() * math.sqrt(z.shape[1]))


def table_digest(df: pd.DataFrame) -> str:
    """A short content hash of a table (identifies the pairs a head was trained on)."""
    import pandas as pd

    h = pd.util.hash_pandas_object(df, index=False).to_numpy()
    return hashlib.sha256(h.tobytes() + ",".join(map(str, df.columns)).encode()).hexdigest()[:16]


def _is_head_file(name: str) -> bool:
    return name in HEAD_FILES


def check_head_output(out: Path, force: bool, resume: bool) -> set[str]:
    """Refuse an existing head without ``force``/``resume`` (and a file, another folder, a
    resume without a checkpoint); returns the head's file names (temp files of killed
    runs count as nothing). Light: train calls it before torch loads, and again under the
    head's lock (:func:`prepare_head_dir`)."""
    if out.exists() and not out.is_dir():
        raise PairkitError(f"output {out} is an existing file, expected a head folder")
    names = {e.name for e in out.iterdir()} - {LOCK_NAME} if out.is_dir() else set()
    temps = {n for n in names if n.startswith(".") and n.endswith(".tmp")}
    if not names - temps:
        if resume:
            raise PairkitError(f"--resume: {out} holds no checkpoint to resume from")
        return names
    ours = {n for n in names if n in HEAD_FILES} | temps
    if names - ours:
        raise PairkitError(f"output {out} is a folder that is not a pairkit head; choose "
                           "another path")
    if resume:
        if CHECKPOINT not in names:
            raise PairkitError(f"--resume: {out} holds no {CHECKPOINT} (no epoch was "
                               "completed)")
        return names
    if not force:
        raise PairkitError(f"head {out} exists; pass --force to replace it or --resume to "
                           "continue it")
    return names


def prepare_head_dir(out: Path, force: bool, resume: bool) -> None:
    """Refuse an existing head without ``force``/``resume``; with ``force`` clear it.

    Call under the head's writer lock: temp files of killed runs are removed first (a
    folder holding nothing else counts as empty).
    """
    if out.is_dir():
        remove_stale_temps(out, _is_head_file)
    names = check_head_output(out, force, resume)
    if resume or not names:
        return
    for name in names:
        p = out / name
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (tuples and lists alike): how fingerprints are compared."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _fingerprint(cfg: TrainConfig, store: Store, pairs_id: dict[str, Any]) -> dict[str, Any]:
    d = asdict(cfg)
    for key in ("epochs", "device", "precision", "stop_on_collapse"):
        d.pop(key)
    d["store"] = store.content_id
    d["pairs"] = pairs_id
    return d


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class _Data:
    """Vectors and groups on the device (or host when streaming) and gather helpers."""

    def __init__(self, vectors: np.ndarray, groups: np.ndarray, device: torch.device,
                 streaming: bool) -> None:
        import torch

        self.device = device
        self.streaming = streaming
        host = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))
        if streaming and device.type == "cuda":
            host = host.pin_memory()
        self.vectors = host if streaming else host.to(device)
        self.groups = torch.from_numpy(groups).to(self.vectors.device)

    def ids(self, ids: np.ndarray) -> torch.Tensor:
        import torch

        return torch.from_numpy(np.ascontiguousarray(ids)).to(self.vectors.device)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.vectors[ids]
        return x.to(self.device, non_blocking=True) if self.streaming else x


def _forward(module: torch.nn.Module, data: _Data, pairs: PairArrays, rows: np.ndarray,
             autocast: Any) -> tuple[torch.Tensor, ...]:
    """Projected, normalised anchors (B, d), positives (B, d), negatives (B, K, d) + masks."""
    import torch

    a_id = data.ids(pairs.anchor[rows])
    p_id = data.ids(pairs.positive[rows])
    n_id = data.ids(pairs.negatives[rows])
    attract = torch.from_numpy(pairs.neg_attract[rows]).to(data.device)
    b, k = n_id.shape
    all_ids = torch.cat([a_id, p_id, n_id.clamp(min=0).reshape(-1)])
    x = data.rows(all_ids)
    with autocast():
        z = module(x)
    z = torch.nn.functional.normalize(z.float(), dim=1)
    za, zp, zn = z[:b], z[b : 2 * b], z[2 * b :].reshape(b, k, z.shape[1])
    valid = (n_id >= 0).to(data.device)
    groups = data.groups[a_id].to(data.device)
    neg_groups = data.groups[n_id.clamp(min=0)].to(data.device)
    return za, zp, zn, valid, attract & valid, groups, neg_groups


def _batches(n: int, batch_size: int) -> list[tuple[int, int]]:
    """(start, stop) of each batch; a last batch of one pair joins the previous one."""
    bounds = [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < 2:
        last = bounds.pop()
        bounds[-1] = (bounds[-1][0], last[1])
    return bounds


def _evaluate(module: torch.nn.Module, data: _Data, pairs: PairArrays, items: np.ndarray,
              cfg: TrainConfig, autocast: Any) -> dict[str, float]:
    """Loss, mean positive/negative cosine and their gap, alignment, uniformity, dim std."""
    import torch

    module.eval()
    losses, weights = [], []
    pos_sum = neg_sum = 0.0
    pos_n = neg_n = 0
    za_all, zp_all = [], []
    with torch.no_grad():
        for start, stop in _batches(len(pairs), cfg.batch_size):
            rows = np.arange(start, stop)
            za, zp, zn, valid, attract, groups, neg_groups = _forward(module, data, pairs, rows,
                                                                      autocast)
            loss = batch_loss(cfg.loss, za, zp, zn, valid, attract, groups, neg_groups)
            losses.append(float(loss))
            weights.append(stop - start)
            scores, pos, neg = build_candidates(za, zp, zn, valid, attract, groups)
            pos_sum += float(scores[pos].sum())
            pos_n += int(pos.sum())
            neg_sum += float(scores[neg].sum())
            neg_n += int(neg.sum())
            za_all.append(za.cpu().numpy())
            zp_all.append(zp.cpu().numpy())
        z_items = []
        for start in range(0, len(items), 4096):
            x = data.rows(data.ids(items[start : start + 4096]))
            with autocast():
                z = module(x)
            z_items.append(torch.nn.functional.normalize(z.float(), dim=1).cpu().numpy())
    module.train()
    z = np.concatenate(z_items) if z_items else np.zeros((0, 1), np.float32)
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


def json_record(record: dict[str, Any]) -> str:
    """One epoch record as strict JSON (NaN/inf -> null)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in record.items()}
    return json.dumps(clean, allow_nan=False)


def _write_log(out: Path, records: list[dict[str, Any]]) -> None:
    with atomic_open(out / LOG) as fh:
        for r in records:
            fh.write(json_record(r) + "\n")


def read_log(out: Path) -> list[dict[str, Any]]:
    """The records of ``train_log.jsonl`` (empty when there is none)."""
    p = out / LOG
    if not p.is_file():
        return []
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line]


def overflow_hint(precision: str) -> str:
    """The NaN-loss message's precision clause: only for reduced precision, naming what
    else to try (fp32 itself can't overflow that way)."""
    others = {"fp16": "fp32 or bf16", "bf16": "fp32"}
    if precision not in others:
        return ""
    return f" or {precision} overflow (--precision {precision}; try {others[precision]})"


def eval_loss_name(metrics_on: str) -> str:
    """What the per-epoch evaluation loss was measured on, for the epoch line and plot."""
    return "validation loss" if metrics_on == "val" else "train-pair loss after the epoch"


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


def _save_checkpoint(out: Path, module: torch.nn.Module, optimizer: Any, scaler: Any,
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


def _load_checkpoint(out: Path) -> dict[str, Any]:
    ckpt = torch_load_weights(out / CHECKPOINT, "--resume:")
    if not isinstance(ckpt, dict) or not {"model", "optimizer", "epoch", "step"} <= set(ckpt):
        raise PairkitError(f"--resume: {out / CHECKPOINT} is not a pairkit checkpoint")
    return ckpt


def _read_config(out: Path) -> dict[str, Any]:
    """config.json of a head folder ({} when missing); PairkitError when unreadable."""
    if not (out / CONFIG).is_file():
        return {}
    try:
        old = read_json_file(out / CONFIG, 16 << 20, "head config")
    except (OSError, PairkitError) as exc:
        raise PairkitError(f"--resume: {out / CONFIG} is unreadable ({exc})") from None
    return old if isinstance(old, dict) else {}


def _place(vectors_bytes: int, device: torch.device) -> tuple[bool, str | None]:
    """(streaming, note): stream from host when the vectors don't fit on the GPU."""
    import torch

    if device.type != "cuda":
        return False, None
    free, _ = torch.cuda.mem_get_info(device)
    if vectors_bytes <= DEVICE_FRACTION * free:
        return False, None
    return True, (f"store vectors ({vectors_bytes / 2**30:.2f} GiB) don't fit on {device} "
                  f"({free / 2**30:.2f} GiB free): kept in host memory, batches copied over")


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
    with writer_lock(Path(out), "head"):
        return _train_locked(store, Path(out), cfg, table=table, table_name=table_name,
                             resume=resume, force=force, hook=hook)


def _read_pairs(table: pd.DataFrame, store: Store, cfg: TrainConfig, allowed: np.ndarray
                ) -> tuple[PairArrays, TableInfo, PositiveSets | None]:
    """The examples of a pair table, what was read, and its mined positives (or None).

    Items with mined positives but no example row of their own (a one-view store) get
    an example whose positive is mined."""
    view_rows, mined_rows = split_mined_rows(table)
    if mined_rows is None:
        pairs, info = pairs_from_table(table, store.count, store.content_id, cfg.fn_mode)
        return pairs, info, None
    if len(view_rows):
        pairs, info = pairs_from_table(view_rows, store.count, store.content_id, cfg.fn_mode)
    else:
        pairs_from_table(mined_rows, store.count, store.content_id, "keep")  # checks ids
        pairs = PairArrays(*(np.zeros(0, np.int64),) * 2, np.zeros((0, 0), np.int64),
                           np.zeros((0, 0), bool))
        info = TableInfo(kind=table_kind(table), rows=0, flagged=0, notes=())
    sets = positive_sets(mined_rows, store.count, allowed)
    extra = mined_only_examples(sets, np.unique(pairs.anchor), allowed)
    if len(extra):
        pairs = concat_pairs(pairs, extra)
    info = TableInfo(kind=info.kind, rows=len(table), flagged=info.flagged, notes=info.notes)
    return pairs, info, sets


def _train_locked(store: Store, out: Path, cfg: TrainConfig, *,
                  table: pd.DataFrame | None, table_name: str | None,
                  resume: bool, force: bool, hook: TrainHook | None) -> TrainResult:
    from pairkit.core.threads import import_torch

    torch = import_torch()


    cfg.check()
    if table is None and cfg.relation is None:
        raise PairkitError("give a pair table (--pairs) or a relation (--relation instance|label)")
    if store.count < 2:
        raise PairkitError(f"store {store.root} has {store.count} items: nothing to train on")
    out = Path(out)
    notes: list[str] = []

    def note(message: str) -> None:
        notes.append(message)
        if hook is not None:
            hook.note(message)

    sources = store.source_codes()
    relation = cfg.relation or "instance"
    labels = store.labels() if relation == "label" else None
    groups = relation_groups(sources, labels, relation)
    val_mask = split_by_source(sources, cfg.val_fraction, cfg.seed, option="--val-fraction",
                               allow_zero=True)
    info: TableInfo | None = None
    mined: PositiveSets | None = None
    if table is not None:
        all_pairs, info, mined = _read_pairs(table, store, cfg, ~val_mask)
        for n in info.notes:
            note(n)
        train_pairs: PairArrays | None = restrict(all_pairs, ~val_mask)
        val_pairs = restrict(all_pairs, val_mask)
        pairs_id: dict[str, Any] = {"table": table_name, "kind": info.kind, "rows": info.rows,
                                    "digest": table_digest(table), "flagged": info.flagged,
                                    "mined_positives": 0 if mined is None else mined.total}
        if len(train_pairs) == 0:
            raise PairkitError("no training pairs left outside the validation sources: lower "
                               "--val-fraction")
    else:
        train_pairs = None
        val_pairs = sample_relation_pairs(groups, val_mask,
                                          np.random.default_rng([cfg.seed, 104729]))
        pairs_id = {"relation": relation}
    if table is None:
        probe = sample_relation_pairs(groups, ~val_mask, np.random.default_rng(0))
        if len(probe) < 2:
            raise PairkitError(
                f"--relation {relation}: fewer than 2 items have a positive in the store "
                "(instance needs 2+ views per source: embed --views 2; or use --relation label "
                "or a pair table)")
        n_examples = len(probe)
    else:
        assert train_pairs is not None
        n_examples = len(train_pairs)
    if cfg.val_fraction > 0 and len(val_pairs) < 2:
        raise PairkitError("--val-fraction leaves fewer than 2 validation pairs: raise it")

    prepare_head_dir(out, force, resume)
    device_name = resolve_device(cfg.device)
    device = torch.device(device_name)
    precision = resolve_precision(cfg.precision, device.type)
    amp_dtype = autocast_dtype(precision)

    def autocast() -> Any:
        # the same code path on every device: CPU autocast (bf16, fp16) is the twin of
        # CUDA's, so the tests exercise what GPU users run
        if amp_dtype is None:
            return torch.autocast(device_type=device.type, enabled=False)
        return torch.autocast(device_type=device.type, dtype=amp_dtype)

    vectors = store.vectors(np.float32)
    streaming, msg = _place(vectors.nbytes, device)
    if msg:
        note(msg)
    data = _Data(vectors, groups, device, streaming)

    spec = head_spec(cfg, store.dim)
    spec.check()
    torch.manual_seed(cfg.seed)
    module = build_module(spec).to(device)
    optimizer = torch.optim.AdamW(module.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None

    steps_per_epoch = len(_batches(n_examples, cfg.batch_size))
    total_steps = steps_per_epoch * cfg.epochs
    warmup_steps = int(cfg.warmup * total_steps)
    fingerprint = _fingerprint(cfg, store, pairs_id)
    records: list[dict[str, Any]] = []
    start_epoch, step = 0, 0
    old: dict[str, Any] = {}
    if resume:
        old = _read_config(out)
        ckpt = _load_checkpoint(out)
        # the checkpoint's own fingerprint decides (config.json may be missing or lag behind)
        saved = json.loads(ckpt["fingerprint"]) if isinstance(ckpt.get("fingerprint"), str) \
            else old.get("fingerprint")
        if saved is None:
            raise PairkitError(f"--resume: {out} has no {CONFIG} and its checkpoint predates "
                               "fingerprints: rerun with --force")
        if not _same(saved, fingerprint):
            raise PairkitError(f"--resume: {out} was trained with other options, store or pairs;"
                               " rerun without --resume (and with --force)")
        module.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if scaler is not None and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
        start_epoch, step = int(ckpt["epoch"]), int(ckpt["step"])
        records = [r for r in read_log(out) if r["epoch"] <= start_epoch]
        was = ckpt.get("epochs", old.get("training", {}).get("epochs"))
        if start_epoch >= cfg.epochs and old.get("epochs_done") == start_epoch:
            if records and not (out / PLOT).exists():  # killed while the plot was written
                note(f"{out}: {PLOT} was missing; written from {LOG}")
                write_plot(out / PLOT, records)
                return TrainResult(head=out, records=records, device=str(device),
                                   precision=precision, streaming=streaming,
                                   examples=n_examples, notes=notes)
            raise PairkitError(f"--resume: {out} already has {start_epoch} epochs; pass a larger "
                               "--epochs to continue")
        if was != cfg.epochs and start_epoch < cfg.epochs:
            note(f"resuming with --epochs {cfg.epochs} (was {was}): the cosine schedule is "
                 "stretched")

    eval_items = np.flatnonzero(val_mask if cfg.val_fraction > 0 else ~val_mask)
    if len(eval_items) > EVAL_ITEMS:
        eval_items = np.sort(np.random.default_rng([cfg.seed, 31]).choice(
            eval_items, EVAL_ITEMS, replace=False))
    metrics_on = "val" if cfg.val_fraction > 0 else "train"

    def config_dict(epochs_done: int, complete: bool, stopped: str | None) -> dict[str, Any]:
        training = asdict(cfg)
        training.pop("loss")
        for key in ("head", "out_dim", "hidden"):
            training.pop(key)
        training.update(device=str(device), precision=precision, streaming=streaming)
        return {
            "format": HEAD_FORMAT, "format_version": HEAD_FORMAT_VERSION,
            "pairkit_version": __version__, "written": _now(),
            "head": spec_dict(spec), "loss": asdict(cfg.loss), "training": training,
            "store": {"path": str(store.root), "content_id": store.content_id,
                      "manifest_hash": store.manifest_hash, "dim": store.dim,
                      "count": store.count, "encoder": store.encoder},
            "pairs": pairs_id, "epochs_done": epochs_done, "complete": complete,
            "stopped": stopped, "fingerprint": fingerprint,
        }

    if start_epoch >= cfg.epochs:
        # killed after its last checkpoint but before config.json: finish the folder
        note(f"{out}: the run was stopped before its {CONFIG} was written; written now")
        write_config(out, config_dict(start_epoch, True, None))
        if records:
            write_plot(out / PLOT, records)
        return TrainResult(head=out, records=records, device=str(device), precision=precision,
                           streaming=streaming, examples=n_examples, notes=notes,
                           out_dim=spec.out_dim, head_kind=spec.kind)
    if hook is not None:
        hook.start(n_examples * (cfg.epochs - start_epoch),
                   f"train {cfg.loss.name} on {device}")
    stopped: str | None = None
    module.train()
    for epoch in range(start_epoch, cfg.epochs):
        rng = np.random.default_rng([cfg.seed, epoch])
        if train_pairs is None:
            epoch_pairs = sample_relation_pairs(groups, ~val_mask, rng)
        else:
            epoch_pairs = train_pairs
        epoch_pairs = epoch_pairs.subset(rng.permutation(len(epoch_pairs)))
        if mined is not None:
            epoch_pairs = swap_positives(epoch_pairs, mined, cfg.positive_share, rng,
                                         cfg.positive_sampling)
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for start, stop in _batches(len(epoch_pairs), cfg.batch_size):
            lr = lr_at(step, total_steps, warmup_steps, cfg.lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            za, zp, zn, valid, attract, g, ng = _forward(module, data, epoch_pairs,
                                                         np.arange(start, stop), autocast)
            loss = batch_loss(cfg.loss, za, zp, zn, valid, attract, g, ng)
            value = float(loss.detach())
            if not math.isfinite(value):
                raise PairkitError(
                    f"loss is {value} at epoch {epoch + 1}, step {step + 1}: likely causes: "
                    f"--temperature too low ({cfg.loss.temperature}), --lr too high ({cfg.lr})"
                    + overflow_hint(precision) + f"; epoch {epoch + 1} was not saved")
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            loss_sum += loss.detach().double() * (stop - start)
            step += 1
            if hook is not None:
                hook.advance(stop - start, value, epoch + 1)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - t0
        metrics = _evaluate(module, data, val_pairs if cfg.val_fraction > 0 else
                            epoch_pairs.subset(np.arange(min(len(epoch_pairs), EVAL_PAIRS))),
                            eval_items, cfg, autocast)
        collapsed = (metrics["dim_std"] < COLLAPSE_STD
                     or metrics["uniformity"] > COLLAPSE_UNIFORMITY)
        record = {"epoch": epoch + 1, "loss": float(loss_sum) / len(epoch_pairs),
                  "lr": lr_at(step - 1, total_steps, warmup_steps, cfg.lr),
                  "seconds": round(seconds, 4), "pairs": len(epoch_pairs),
                  "pairs_per_s": len(epoch_pairs) / seconds,
                  "metrics_on": metrics_on, **metrics, "collapsed": bool(collapsed)}
        records.append(record)
        if collapsed:
            stopped = "collapse" if cfg.stop_on_collapse else None
            note(f"epoch {epoch + 1}: embeddings look collapsed (dim std {metrics['dim_std']:.3f}"
                 f" < {COLLAPSE_STD} or uniformity {metrics['uniformity']:.3f} > "
                 f"{COLLAPSE_UNIFORMITY}): lower --lr, raise --temperature"
                 + ("" if cfg.stop_on_collapse else ", or pass --stop-on-collapse"))
        out.mkdir(parents=True, exist_ok=True)
        save_weights(out, module)
        _write_log(out, records)
        _save_checkpoint(out, module, optimizer, scaler, epoch + 1, step, fingerprint,
                         cfg.epochs)
        done = epoch + 1 == cfg.epochs or stopped is not None
        write_config(out, config_dict(epoch + 1, epoch + 1 == cfg.epochs, stopped))
        if hook is not None:
            hook.epoch_done(record)
        if done:
            break
    write_plot(out / PLOT, records)
    return TrainResult(head=out, records=records, device=str(device), precision=precision,
                       streaming=streaming, examples=n_examples, stopped=stopped, notes=notes,
                       out_dim=spec.out_dim, head_kind=spec.kind,
                       mined_positives=0 if mined is None else mined.total)

