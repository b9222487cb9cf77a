"""One epoch of optimizer steps: the store's vectors on the device (or streamed from
host memory), batch bounds, the gather-and-project forward pass, the learning-rate
schedule, and the NaN-loss stop."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.devices import host_tensor
from pairkit.errors import PairkitError
from pairkit.train.data import PairArrays
from pairkit.train.exclusions import batch_table
from pairkit.train.losses import batch_loss
from pairkit.train.losses.candidates import PairGroups

if TYPE_CHECKING:
    import torch

    from pairkit.train.config import TrainConfig, TrainHook

DEVICE_FRACTION = 0.5
Autocast = Callable[[], Any]  # a fresh autocast context manager per call


class DeviceData:
    """Vectors and groups on the device (or host when streaming) and gather helpers."""

    def __init__(self, vectors: np.ndarray, groups: np.ndarray, device: torch.device,
                 streaming: bool) -> None:
        import torch

        self.device = device
        self.streaming = streaming
        host = host_tensor(np.ascontiguousarray(vectors, dtype=np.float32))
        if streaming and device.type == "cuda":
            host = host.pin_memory()
        self.vectors = host if streaming else host.to(device)
        self.groups = torch.from_numpy(groups).to(self.vectors.device)
        self.groups_host = groups
        # the run's known same-thing pairs by group (pairkit.train.exclusions), or None
        self.excluded: np.ndarray | None = None

    def ids(self, ids: np.ndarray) -> torch.Tensor:
        """Row ids as a tensor where the vectors are."""
        import torch

        return torch.from_numpy(np.ascontiguousarray(ids)).to(self.vectors.device)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The vectors of rows ``ids`` (len(ids), d) on the compute device."""
        x = self.vectors[ids]
        return x.to(self.device, non_blocking=True) if self.streaming else x


def place_vectors(vectors_bytes: int, device: torch.device) -> tuple[bool, str | None]:
    """(streaming, note): stream from host when the vectors don't fit on the GPU."""
    import torch

    if device.type != "cuda":
        return False, None
    free, _ = torch.cuda.mem_get_info(device)
    if vectors_bytes <= DEVICE_FRACTION * free:
        return False, None
    return True, (f"store vectors ({vectors_bytes / 2**30:.2f} GiB) don't fit on {device} "
                  f"({free / 2**30:.2f} GiB free): kept in host memory, batches copied over")


def device_data(vectors: np.ndarray, groups: np.ndarray, device: torch.device
                ) -> tuple[DeviceData, str | None]:
    """The vectors (n, d) and groups (n,) where the run reads them, and a note when they
    are streamed from host memory (see :func:`place_vectors`)."""
    streaming, msg = place_vectors(vectors.nbytes, device)
    return DeviceData(vectors, groups, device, streaming), msg


def make_autocast(device: torch.device, amp_dtype: Any) -> Autocast:
    """Autocast contexts for ``amp_dtype`` (None: full precision) on ``device``."""
    import torch

    def autocast() -> Any:
        # the same code path on every device: CPU autocast (bf16, fp16) is the twin of
        # CUDA's, so the tests exercise what GPU users run
        if amp_dtype is None:
            return torch.autocast(device_type=device.type, enabled=False)
        return torch.autocast(device_type=device.type, dtype=amp_dtype)

    return autocast


def forward(module: torch.nn.Module, data: DeviceData, pairs: PairArrays, rows: np.ndarray,
            autocast: Autocast, with_negatives: bool = False) -> tuple[torch.Tensor, ...]:
    """Projected, normalised anchors (B, d), positives (B, d), negatives (B, K, d), their
    masks (a negative equal to its example's anchor or positive is not valid), the pairs'
    groups (B, 2: the anchor's, the positive's; a :class:`PairGroups` with the batch's
    known same-thing table when the run has one, holding the negatives' groups too with
    ``with_negatives``, which supcon needs) and the negatives' (B, K), the
    anchors' input rows normalised (B, d_in), and the store row of every output (2B + B K,:
    anchors, positives, negatives; -1 for padding)."""
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
    # padding, and a negative that is the example's own anchor or positive (a mined
    # positive swapped in, a hand-made table): no part in the loss
    valid = ((n_id >= 0) & (n_id != a_id[:, None]) & (n_id != p_id[:, None])).to(data.device)
    # each pair's groups: its anchor's and its positive's (a mined positive's differs)
    groups: Any = torch.stack([data.groups[a_id], data.groups[p_id]], dim=1).to(data.device)
    if data.excluded is not None:
        # padding takes row 0's group: it is no feature of the loss (valid False)
        negative_groups = (data.groups_host[pairs.negatives[rows].clip(min=0)].reshape(-1)
                           if with_negatives else None)
        table, index = batch_table(data.excluded, data.groups_host,
                                   data.groups_host[pairs.anchor[rows]],
                                   data.groups_host[pairs.positive[rows]], negative_groups)
        groups = PairGroups(groups, torch.from_numpy(table).to(data.device),
                            torch.from_numpy(index).to(data.device))
    neg_groups = data.groups[n_id.clamp(min=0)].to(data.device)
    xa = torch.nn.functional.normalize(x[:b].float(), dim=1)
    rows_out = torch.cat([a_id, p_id, n_id.reshape(-1)])
    return za, zp, zn, valid, attract & valid, groups, neg_groups, xa, rows_out


def batches(n: int, batch_size: int) -> list[tuple[int, int]]:
    """(start, stop) of each batch; a last batch of one pair joins the previous one."""
    bounds = [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < 2:
        last = bounds.pop()
        bounds[-1] = (bounds[-1][0], last[1])
    return bounds


def lr_at(step: int, total: int, warmup: int, lr: float) -> float:
    """Learning rate at optimizer ``step`` (0-based): linear warmup, then cosine to 0."""
    if step < warmup:
        return lr * (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min((step - warmup) / span, 1.0)
    return lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def overflow_hint(precision: str) -> str:
    """The NaN-loss message's precision clause: only for reduced precision, naming what
    else to try (fp32 itself can't overflow that way)."""
    others = {"fp16": "fp32 or bf16", "bf16": "fp32"}
    if precision not in others:
        return ""
    return f" or {precision} overflow (--precision {precision}; try {others[precision]})"


def train_epoch(module: torch.nn.Module, optimizer: Any, scaler: Any, data: DeviceData,
                pairs: PairArrays, cfg: TrainConfig, *, epoch: int, step: int,
                total_steps: int, warmup_steps: int, precision: str, autocast: Autocast,
                hook: TrainHook | None) -> tuple[float, int, float]:
    """One pass over ``pairs`` in batches of ``cfg.batch_size``, from optimizer ``step``.

    Returns (the sum over pairs of the batch loss, the next step, seconds). Raises
    PairkitError on a non-finite loss (nothing of the epoch is saved).
    """
    import torch

    device = data.device
    t0 = time.perf_counter()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    for start, stop in batches(len(pairs), cfg.batch_size):
        lr = lr_at(step, total_steps, warmup_steps, cfg.lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        za, zp, zn, valid, attract, g, ng, xa, ids = forward(
            module, data, pairs, np.arange(start, stop), autocast,
            with_negatives=cfg.loss.name == "supcon")
        loss = batch_loss(cfg.loss, za, zp, zn, valid, attract, g, ng, xa, rows=ids)
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
    return float(loss_sum), step, seconds
