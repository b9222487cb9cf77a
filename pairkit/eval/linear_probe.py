"""Linear probe: multinomial logistic regression on frozen features, in torch.

Objective (the same as scikit-learn's ``LogisticRegression`` with
C = 1 / (weight_decay * n); with two classes C = 2 / (weight_decay * n), since scikit-learn
then fits one weight vector v and the softmax's two, w1 = -w0 = v / 2, share the penalty)::

    mean_i CE(W x_i + b, y_i) + weight_decay / 2 * ||W||^2     (b not penalised)

With ``balanced`` every row's cross-entropy is weighted by ``n / (classes x n_c)`` (``n_c``
the rows of its class; the weighted mean replaces the mean): each class weighs the same,
as if the rows of the smaller classes were repeated until every class had as many (the
probe's class prior then no longer follows a long-tailed reference set).

Minimised with full-batch L-BFGS (strong Wolfe line search; pairkit's own,
:mod:`pairkit.eval.lbfgs`, since ``torch.optim``'s imports ``torch._dynamo``, about 2 s
of a small ``eval``), the loss and its gradient accumulated over row chunks so memory
stays O(chunk x classes), a chunk being :func:`chunk_rows` rows: about a million logits
(4 MiB in float32) whatever the class count (65,536 rows before, whose logits at 100
classes took 26 MB a buffer, four of them alive in the backward pass, and left the
allocator's heap ever larger fit after fit: docs/benchmarks.md, "The linear probe's
memory"). The weight decay is chosen by the cross-entropy of a validation part of the
training rows (split by source), then the probe is refitted on all training rows.

Why the cross-entropy and not the validation top-1: on a validation part of about a
thousand rows the decays' top-1 differ by a handful of rows, and the choice followed
them (on one set the same features scored 0.926 or 0.945 on the test queries by the
decay a few validation rows picked, docs/benchmarks.md); the mean log-loss moves
smoothly with the decay and picks the same one across validation splits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pairkit.eval.lbfgs import minimize_lbfgs

DEFAULT_WEIGHT_DECAYS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)
# logits (rows x classes) computed at once by the fits and the validation pass
LOGITS_PER_CHUNK = 1 << 20


def chunk_rows(n_classes: int) -> int:
    """Rows per chunk of the fits and the validation pass: ``LOGITS_PER_CHUNK`` logits
    (at least one row)."""
    return max(1, LOGITS_PER_CHUNK // max(n_classes, 1))


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of :func:`linear_probe`; ``predictions`` are class codes (nq,);
    ``val_loss`` (the choice's criterion) and ``val_top1`` per weight decay tried;
    ``unvalidated``: why the decay was not chosen by validation (then it is the first of
    the list), "" when it was."""

    top1: float
    mean_per_class_recall: float
    weight_decay: float
    val_top1: dict[float, float]
    predictions: np.ndarray
    val_loss: dict[float, float]
    unvalidated: str = ""


def fit_logistic(
    x: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    weight_decay: float,
    *,
    device: str = "cpu",
    max_iter: int = 300,
    tolerance: float = 1e-7,
    chunk: int | None = None,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    row_weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fit the objective above. ``x`` (n, d), ``y`` int codes in [0, n_classes);
    ``row_weights`` (n,): each row's weight in the mean cross-entropy (None: 1 each);
    ``chunk``: rows per chunk (None: :func:`chunk_rows`).

    Minimised by :func:`~pairkit.eval.lbfgs.minimize_lbfgs` (20 pairs of history), from
    zero or from ``init`` ``(W, b)`` (a warm start). Stops after ``max_iter`` L-BFGS
    iterations (or ``max_iter * 5 // 4`` evaluations of the loss), when the gradient's
    largest entry falls below ``tolerance``, or when an iteration changes the loss or
    moves every weight by less than ``tolerance * 1e-3``.

    Returns ``(W, b)``: float32 (d, n_classes) and (n_classes,).
    """
    from pairkit.core.threads import import_torch

    torch = import_torch()

    dev = torch.device(device)
    xt = torch.as_tensor(np.ascontiguousarray(x, dtype=np.float32), device=dev)
    yt = torch.as_tensor(np.asarray(y, dtype=np.int64), device=dev)
    n, d = xt.shape
    chunk = chunk_rows(n_classes) if chunk is None else chunk
    weights = None if row_weights is None else torch.as_tensor(
        np.asarray(row_weights, dtype=np.float32), device=dev)
    total_weight = float(n) if row_weights is None else float(np.sum(row_weights))
    # W (d x classes, row-major) and b, one flat vector for the minimiser
    size = d * n_classes
    theta = torch.zeros(size + n_classes, dtype=torch.float32, device=dev)
    if init is not None:
        theta[:size] = torch.as_tensor(np.asarray(init[0], dtype=np.float32).reshape(-1),
                                       device=dev)
        theta[size:] = torch.as_tensor(np.asarray(init[1], dtype=np.float32), device=dev)

    def objective(flat: torch.Tensor) -> tuple[float, torch.Tensor]:
        # the loss and its gradient by hand (autograd's backward took 2.2x as long per
        # evaluation on the CPU: it forms x^T g in a layout MKL is slow at):
        # d/dlogits of the mean cross-entropy is (softmax - onehot) x the row's weight
        w, b = flat[:size].view(d, n_classes), flat[size:]
        # sums over the chunks in float64: the same whatever the chunk size, to
        # float32's rounding of each chunk's part
        total = torch.zeros((), dtype=torch.float64, device=dev)
        grad_wt = torch.zeros(n_classes, d, dtype=torch.float64, device=dev)
        grad_b = torch.zeros(n_classes, dtype=torch.float64, device=dev)
        for s in range(0, n, chunk):
            xc, yc = xt[s : s + chunk], yt[s : s + chunk]
            logits = torch.addmm(b, xc, w)
            lse = torch.logsumexp(logits, dim=1)
            per_row = lse - logits.gather(1, yc[:, None])[:, 0]
            g = torch.exp(logits - lse[:, None])
            g[torch.arange(len(yc), device=dev), yc] -= 1.0
            if weights is not None:
                per_row = per_row * weights[s : s + chunk]
                g *= weights[s : s + chunk, None]
            total += per_row.sum(dtype=torch.float64)
            grad_wt += g.T @ xc
            grad_b += g.sum(dim=0, dtype=torch.float64)
        grad = torch.empty_like(flat)
        grad[:size].view(d, n_classes).copy_((grad_wt.T / total_weight).float()
                                             + weight_decay * w)
        grad[size:] = (grad_b / total_weight).float()
        # the value in float32, as the fits before (its changes below tolerance_change
        # stop the fit)
        loss = (total / total_weight).float() + 0.5 * weight_decay * (w * w).sum()
        return float(loss), grad

    with torch.no_grad():
        res = minimize_lbfgs(objective, theta, max_iter=max_iter, history_size=20,
                             tolerance_grad=tolerance, tolerance_change=tolerance * 1e-3)
    out = res.x.cpu().numpy()
    return out[:size].reshape(d, n_classes).copy(), out[size:].copy()


def predict_logistic(x: np.ndarray, w: np.ndarray, b: np.ndarray,
                     chunk: int = 65536) -> np.ndarray:
    """Arg-max class code (int64 (n,)) of x @ w + b, in chunks."""
    out = np.empty(len(x), dtype=np.int64)
    for s in range(0, len(x), chunk):
        out[s : s + chunk] = np.argmax(np.asarray(x[s : s + chunk], np.float32) @ w + b, axis=1)
    return out


def top1_and_log_loss(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: np.ndarray,
                      chunk: int | None = None, row_weights: np.ndarray | None = None
                      ) -> tuple[float, float]:
    """``(top-1, mean cross-entropy -log softmax(x @ w + b)[y])`` over the rows, from one
    pass of logits in chunks (the top-1 is :func:`predict_logistic`'s arg-max; the
    cross-entropy summed in float64; with ``row_weights`` its weighted mean); ``chunk``
    rows at a time (None: :func:`chunk_rows`)."""
    chunk = chunk_rows(len(b)) if chunk is None else chunk
    hits, total = 0, 0.0
    for s in range(0, len(x), chunk):
        z = np.asarray(x[s : s + chunk], np.float32) @ w + b
        true = np.asarray(y[s : s + chunk])
        hits += int((np.argmax(z, axis=1) == true).sum())
        z = z.astype(np.float64)
        z -= z.max(axis=1, keepdims=True)
        log_norm = np.log(np.exp(z).sum(axis=1))
        ce = log_norm - z[np.arange(len(z)), true]
        if row_weights is not None:
            ce = ce * np.asarray(row_weights[s : s + chunk], dtype=np.float64)
        total += float(ce.sum())
    n = max(len(x), 1)
    weight = n if row_weights is None else max(float(np.sum(row_weights)), 1e-300)
    return hits / n, total / weight


def balanced_weights(y: np.ndarray) -> np.ndarray:
    """float64 (n,): ``n / (classes x n_c)`` for a row of class ``c`` (codes ``y``), mean 1:
    every class weighs the same in a weighted mean."""
    counts = np.bincount(y)
    present = int((counts > 0).sum())
    return len(y) / (present * counts[y].astype(np.float64))


def class_recall(hits: np.ndarray, counts: np.ndarray) -> float:
    """Mean over the classes with a query (``counts`` > 0) of the share of their queries
    right (``hits`` of ``counts``, both per class code): every class weighs the same,
    however many queries it has (the figure a balanced test would give a long-tailed
    set). Counts, so that a metric taken block by block adds them up first (``eval``'s
    kNN)."""
    present = counts > 0
    return float(np.mean(hits[present] / counts[present]))


def mean_per_class_recall(pred: np.ndarray, true: np.ndarray) -> float:
    """Mean over the classes present in ``true`` (int codes >= 0) of the fraction
    predicted right (:func:`class_recall`)."""
    true = np.asarray(true, dtype=np.int64)
    size = int(true.max(initial=-1)) + 1
    right = true[np.asarray(pred) == true]
    return class_recall(np.bincount(right, minlength=size), np.bincount(true, minlength=size))


def linear_probe(
    train_x: np.ndarray,
    train_y: np.ndarray,
    train_groups: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    *,
    weight_decays: tuple[float, ...] = DEFAULT_WEIGHT_DECAYS,
    val_fraction: float = 0.2,
    seed: int = 0,
    device: str = "cpu",
    max_iter: int = 300,
    test_block: int = 65536,
    balanced: bool = False,
    on_fit: Callable[[str], None] | None = None,
) -> ProbeResult:
    """Train on (train_x, train_y), choose the weight decay by the cross-entropy of a
    validation part, test. Without a validation part (one decay, fewer than 2 sources,
    or 1 class left to fit) the first decay is taken, and ``unvalidated`` says why.

    ``test_x``: an array, or rows read on demand (a :class:`~pairkit.core.row_view.RowView`),
    predicted ``test_block`` rows at a time.

    Labels are int codes >= 0 shared by both sides; a test class absent from the
    training side is never predicted (its queries count as wrong). ``train_groups``
    (source codes) keep views of one source on one side of the validation split.
    ``balanced``: every class weighs the same in the fits and in the validation
    cross-entropy (:func:`balanced_weights` of the rows of each: the fit part, the
    validation part, all training rows for the last fit). ``on_fit(line)``: as each fit
    starts (one per decay of the validated path, then the last on all training rows).
    """
    from pairkit.core.heap import return_free_memory
    from pairkit.eval.split import split_by_source

    classes, y_train = np.unique(train_y, return_inverse=True)
    n_classes = len(classes)
    decays = tuple(weight_decays)
    val_top1: dict[float, float] = {}
    val_loss: dict[float, float] = {}
    solutions: dict[float, tuple[np.ndarray, np.ndarray]] = {}
    weights = balanced_weights(y_train) if balanced else None
    unvalidated = ""
    if len(decays) < 2:
        unvalidated = "one weight decay given"
    elif len(np.unique(train_groups)) < 2:
        unvalidated = "the references have fewer than 2 sources to split"
    else:
        is_val = split_by_source(train_groups, val_fraction, seed)
        fit = ~is_val
        if not is_val.any():
            unvalidated = "the validation part by source is empty"
        elif len(np.unique(y_train[fit])) < 2:
            unvalidated = "the references less a validation part by source have 1 class"
        else:
            x_fit, y_fit = train_x[fit], y_train[fit]  # gathered once for the whole path
            x_val, y_val = train_x[is_val], y_train[is_val]
            # each part balanced on its own: the split by source moves the class shares
            w_fit = None if weights is None else balanced_weights(y_fit)
            w_val = None if weights is None else balanced_weights(y_val)
            # regularisation path: strongest decay first, each fit warm-starts the next
            init = None
            for i, wd in enumerate(sorted(decays, reverse=True)):
                if on_fit is not None:
                    on_fit(f"linear probe: fit {i + 1} of {len(decays) + 1} (weight decay "
                           f"{wd:g}, {len(y_fit):,} rows x {n_classes:,} classes)")
                init = fit_logistic(x_fit, y_fit, n_classes, wd, device=device,
                                    max_iter=max_iter, init=init, row_weights=w_fit)
                solutions[wd] = init
                val_top1[wd], val_loss[wd] = top1_and_log_loss(x_val, y_val, *init,
                                                               row_weights=w_val)
                return_free_memory()  # the fit's chunks, freed into holes of the heap
    # the lowest validation cross-entropy; equal ones: the larger decay
    best = min(val_loss, key=lambda wd: (val_loss[wd], -wd)) if val_loss else decays[0]
    if on_fit is not None:
        fits = len(decays) + 1 if val_loss else 1
        on_fit(f"linear probe: fit {fits} of {fits} (weight decay {best:g}, "
               f"{len(y_train):,} rows x {n_classes:,} classes)")
    w, b = fit_logistic(train_x, y_train, n_classes, best, device=device, max_iter=max_iter,
                        init=solutions.get(best), row_weights=weights)
    pred = classes[predict_logistic(test_x, w, b, chunk=test_block)]
    test_y = np.asarray(test_y, dtype=np.int64)
    return ProbeResult(
        top1=float(np.mean(pred == test_y)),
        mean_per_class_recall=mean_per_class_recall(pred, test_y),
        weight_decay=float(best),
        val_top1=val_top1,
        predictions=pred,
        val_loss=val_loss,
        unvalidated=unvalidated,
    )
