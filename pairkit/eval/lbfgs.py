"""Full-batch L-BFGS with a strong Wolfe line search, for the linear probe, without
``torch.optim``.

The method of Nocedal & Wright, *Numerical Optimization* (2nd ed., Springer 2006): the
direction by the two-loop recursion over the last ``history_size`` pairs
``s = x_{k+1} - x_k``, ``y = g_{k+1} - g_k`` (Algorithm 7.4), the initial matrix
``H0 = (s^T y / y^T y) I`` of the newest pair (eq. 7.20), a pair kept only when
``s^T y > 0`` (Algorithm 7.5); the step by the line search of Algorithm 3.5 (bracketing)
and 3.6 (``zoom``), each trial step the minimiser of the cubic that interpolates the
values and slopes at two known steps (eq. 3.59), kept away from the ends of its interval.
One departure from the book: a trial step whose value equals the start's exactly meets
sufficient decrease (near the minimum the decrease asked for is below a float32 value's
rounding; the step is taken and the unchanged value ends the minimisation, instead of a
zoom spending its evaluations on equal values).

Why not ``torch.optim.LBFGS``: every ``torch.optim.Optimizer`` imports ``torch._dynamo``
when it is made (its methods are wrapped to keep them out of ``torch.compile``), about
1.4 s of a process on a 2-core CPU, and a small ``pairkit eval`` with a linear probe took
about 2 s less without it (docs/benchmarks.md, "The linear probe without torch.optim");
``train`` steps with its own AdamW for the same reason (``pairkit/train/adamw.py``).

The variable is one flat tensor (any device, float32 or float64); the objective
returns its value as a float and its gradient as a tensor like ``x``. The stopping rules
are ``torch.optim.LBFGS``'s: ``max_iter`` iterations, ``max_eval`` evaluations, the
gradient's largest entry at most ``tolerance_grad``, or a step or a change of the value
at most ``tolerance_change``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# sufficient decrease (c1) and curvature (c2) of the strong Wolfe conditions (N&W 3.7),
# the values N&W suggest for quasi-Newton methods
SUFFICIENT_DECREASE = 1e-4
CURVATURE = 0.9
# evaluations one line search may make
LINE_SEARCH_EVALS = 25
# a pair (s, y) is kept when s^T y exceeds this (0 in exact arithmetic, N&W 7.5)
MIN_CURVATURE = 1e-10

Objective = Callable[["torch.Tensor"], "tuple[float, torch.Tensor]"]


@dataclass(frozen=True)
class LbfgsResult:
    """``x`` the last iterate, ``value`` and ``grad`` the objective's there;
    ``iterations`` done, ``evaluations`` of the objective made; ``stop`` why it
    stopped: "gradient", "max_iter", "max_eval", "step", "change" or "direction"
    (the direction no longer goes down)."""

    x: torch.Tensor
    value: float
    grad: torch.Tensor
    iterations: int
    evaluations: int
    stop: str


@dataclass(frozen=True)
class Trial:
    """One evaluation along the search direction: step ``t``, value ``f``, slope
    ``slope`` (the gradient's dot with the direction) and the gradient ``g``."""

    t: float
    f: float
    slope: float
    g: torch.Tensor


def minimize_lbfgs(
    objective: Objective,
    x0: torch.Tensor,
    *,
    max_iter: int = 100,
    max_eval: int | None = None,
    tolerance_grad: float = 1e-7,
    tolerance_change: float = 1e-9,
    history_size: int = 20,
) -> LbfgsResult:
    """Minimise ``objective`` (``x -> (value, gradient)``) from ``x0`` (a flat tensor,
    not changed) by L-BFGS.

    Stops when the gradient's largest absolute entry is at most ``tolerance_grad`` (at
    ``x0`` too: then no iteration is made), after ``max_iter`` iterations, once
    ``max_eval`` evaluations are made (checked after each iteration; None:
    ``max_iter * 5 // 4``), when an iteration's step moves no entry by more than
    ``tolerance_change`` or changes the value by less than it, or when the direction's
    slope is above ``-tolerance_change``.
    """
    if max_eval is None:
        max_eval = max_iter * 5 // 4
    x = x0.detach().clone()
    f, g = objective(x)
    evaluations, iterations = 1, 0
    if float(g.abs().max()) <= tolerance_grad:
        return LbfgsResult(x, f, g, 0, evaluations, "gradient")
    history: list[tuple[torch.Tensor, torch.Tensor, float]] = []  # (s, y, 1 / y^T s)
    gamma = 1.0  # H0 = gamma I
    stop = "max_iter"
    while iterations < max_iter:
        d = -two_loop(g, history, gamma)
        slope = float(g.dot(d))
        if slope > -tolerance_change:
            stop = "direction"
            break
        # the first step: at most 1 along -g, less for a large gradient (the quasi-Newton
        # step 1 is only natural once the curvature has been seen, N&W 3.5)
        t0 = min(1.0, 1.0 / float(g.abs().sum())) if iterations == 0 else 1.0
        end, used = strong_wolfe(objective, x, f, g, d, slope, t0, tolerance_change)
        evaluations += used
        iterations += 1
        s = end.t * d
        y = end.g - g
        sy = float(y.dot(s))
        if sy > MIN_CURVATURE:
            if len(history) == history_size:
                history.pop(0)
            history.append((s, y, 1.0 / sy))
            gamma = sy / float(y.dot(y))
        f_before = f
        x = x + s
        f, g = end.f, end.g
        if float(g.abs().max()) <= tolerance_grad:
            stop = "gradient"
            break
        if iterations >= max_iter:
            break
        if evaluations >= max_eval:
            stop = "max_eval"
            break
        if float(s.abs().max()) <= tolerance_change:
            stop = "step"
            break
        if abs(f - f_before) < tolerance_change:
            stop = "change"
            break
    return LbfgsResult(x, f, g, iterations, evaluations, stop)


def two_loop(g: torch.Tensor, history: list[tuple[torch.Tensor, torch.Tensor, float]],
             gamma: float) -> torch.Tensor:
    """``H g`` for the L-BFGS inverse Hessian ``H`` of the pairs ``(s, y, 1 / y^T s)``
    (oldest first) and ``H0 = gamma I`` (N&W Algorithm 7.4)."""
    q = g.clone()
    alphas = []
    for s, y, rho in reversed(history):
        a = rho * float(s.dot(q))
        q.add_(y, alpha=-a)
        alphas.append(a)
    r = q.mul_(gamma)
    for (s, y, rho), a in zip(history, reversed(alphas), strict=True):
        b = rho * float(y.dot(r))
        r.add_(s, alpha=a - b)
    return r


def cubic_minimiser(a: Trial, b: Trial, low: float, high: float) -> float:
    """The minimiser of the cubic through the values and slopes at ``a.t`` and ``b.t``
    (N&W eq. 3.59), clipped to ``[low, high]``; the middle of it when the cubic has no
    minimiser (or the numbers are not finite)."""
    d1 = a.slope + b.slope - 3.0 * (a.f - b.f) / (a.t - b.t)
    square = d1 * d1 - a.slope * b.slope
    if not (square >= 0.0 and math.isfinite(square)):
        return (low + high) / 2.0
    d2 = math.copysign(math.sqrt(square), b.t - a.t)
    denominator = b.slope - a.slope + 2.0 * d2
    if denominator == 0.0:
        return (low + high) / 2.0
    t = b.t - (b.t - a.t) * (b.slope + d2 - d1) / denominator
    if not math.isfinite(t):
        return (low + high) / 2.0
    return min(max(t, low), high)


def strong_wolfe(objective: Objective, x: torch.Tensor, f0: float, g0: torch.Tensor,
                 d: torch.Tensor, slope0: float, t1: float, tolerance_change: float
                 ) -> tuple[Trial, int]:
    """A step along ``d`` from ``x`` (value ``f0``, gradient ``g0``, slope ``slope0`` < 0)
    that meets the strong Wolfe conditions (N&W Algorithm 3.5, first trial ``t1``), and
    the evaluations made. After ``LINE_SEARCH_EVALS`` evaluations, or once the
    bracket is narrower than ``tolerance_change`` along ``d``, the lowest point of
    sufficient decrease found (step 0 when there is none)."""

    def trial(t: float) -> Trial:
        f, g = objective(x + t * d)
        return Trial(t, f, float(g.dot(d)), g)

    def armijo(p: Trial) -> bool:
        # sufficient decrease (False for a NaN value), or no change at all: near the
        # minimum the decrease asked for falls below the rounding of a float32 value, and
        # a zoom towards step 0 would spend its evaluations on equal values; the step is
        # taken, and the unchanged value ends the minimisation (tolerance_change)
        return p.f <= f0 + SUFFICIENT_DECREASE * p.t * slope0 or p.f == f0

    def curved(p: Trial) -> bool:  # the strong curvature condition
        return abs(p.slope) <= -CURVATURE * slope0

    start = Trial(0.0, f0, slope0, g0)
    prev, t, evals = start, t1, 0
    # bracketing (Algorithm 3.5): grow the step until it overshoots
    while True:
        cur = trial(t)
        evals += 1
        if not armijo(cur) or (prev.t > 0.0 and cur.f >= prev.f):
            lo, hi = prev, cur
            break
        if curved(cur):
            return cur, evals
        if cur.slope >= 0.0:
            lo, hi = cur, prev
            break
        if evals >= LINE_SEARCH_EVALS:
            return cur, evals
        # the next step beyond cur, by the cubic through prev and cur, between a tenth
        # of the last increase further and ten times as far
        width = cur.t - prev.t
        t = cubic_minimiser(prev, cur, cur.t + 0.1 * width, cur.t + 10.0 * width)
        prev = cur
    # zoom (Algorithm 3.6): lo meets sufficient decrease and is the lowest such point
    # seen; the slope at lo points towards hi, so a minimiser lies between them
    scale = float(d.abs().max())
    while evals < LINE_SEARCH_EVALS and abs(hi.t - lo.t) * scale > tolerance_change:
        left, right = min(lo.t, hi.t), max(lo.t, hi.t)
        margin = 0.1 * (right - left)  # each trial cuts at least a tenth of the bracket
        cur = trial(cubic_minimiser(lo, hi, left + margin, right - margin))
        evals += 1
        if not armijo(cur) or cur.f >= lo.f:
            hi = cur
            continue
        if curved(cur):
            return cur, evals
        if cur.slope * (hi.t - lo.t) >= 0.0:
            hi = lo
        lo = cur
    return lo, evals
