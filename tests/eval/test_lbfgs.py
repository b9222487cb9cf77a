"""pairkit's own L-BFGS (pairkit/eval/lbfgs.py) against minimisers known by hand and
scipy's L-BFGS-B, its stopping rules, and the probe and ``eval`` without torch._dynamo
(the reason the module exists)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pairkit.eval.lbfgs import minimize_lbfgs, two_loop
from pairkit.eval.linear_probe import fit_logistic
from tests.conftest import random_store

ROOT = Path(__file__).resolve().parents[2]

# a symmetric positive definite A and b = A x* for x* = (1, -2, 0.5):
# A x* = (4 - 2, 1 - 6 + 0.5, -2 + 1) = (2, -4.5, -1)
A = torch.tensor([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]], dtype=torch.float64)
B = torch.tensor([2.0, -4.5, -1.0], dtype=torch.float64)
X_STAR = [1.0, -2.0, 0.5]


def quadratic(x: torch.Tensor) -> tuple[float, torch.Tensor]:
    """0.5 x^T A x - b^T x, gradient A x - b."""
    return float(0.5 * x @ A @ x - B @ x), A @ x - B


def rosenbrock(x: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(1 - x0)^2 + 100 (x1 - x0^2)^2: minimum 0 at (1, 1)."""
    a, b = float(x[0]), float(x[1])
    value = (1 - a) ** 2 + 100 * (b - a * a) ** 2
    grad = [-2 * (1 - a) - 400 * a * (b - a * a), 200 * (b - a * a)]
    return value, torch.tensor(grad, dtype=x.dtype)


class Counted:
    """An objective that counts its evaluations."""

    def __init__(self, fn) -> None:  # noqa: ANN001 - an objective
        self.fn, self.calls = fn, 0

    def __call__(self, x: torch.Tensor) -> tuple[float, torch.Tensor]:
        self.calls += 1
        return self.fn(x)


def test_a_convex_quadratic_reaches_its_minimiser_known_by_hand() -> None:
    x0 = torch.zeros(3, dtype=torch.float64)
    f = Counted(quadratic)
    res = minimize_lbfgs(f, x0, max_iter=50, tolerance_grad=1e-10, tolerance_change=0.0)
    np.testing.assert_allclose(res.x.numpy(), X_STAR, atol=1e-10)
    # the value at x*: -0.5 b^T x* = -0.5 (2 + 9 - 0.5)
    assert res.value == pytest.approx(-5.25, abs=1e-12)
    assert res.stop == "gradient" and res.iterations < 20
    assert res.evaluations == f.calls
    assert torch.equal(x0, torch.zeros(3, dtype=torch.float64))  # x0 not changed


def test_rosenbrock_from_the_classic_start() -> None:
    x0 = torch.tensor([-1.2, 1.0], dtype=torch.float64)
    res = minimize_lbfgs(rosenbrock, x0, max_iter=500, tolerance_grad=1e-10,
                         tolerance_change=1e-14)
    np.testing.assert_allclose(res.x.numpy(), [1.0, 1.0], atol=1e-6)
    assert res.value < 1e-12
    # the curved valley takes a few dozen iterations, not hundreds
    assert 10 < res.iterations < 100


def test_two_loop_recursion_is_the_bfgs_inverse_hessian() -> None:
    """With the pairs (s, y) the two-loop product is H g for H from the BFGS update
    H+ = (I - rho s y^T) H (I - rho y s^T) + rho s s^T applied oldest first to gamma I
    (N&W eq. 6.17), built here as a matrix."""
    rng = np.random.default_rng(0)
    n = 5
    m = rng.normal(size=(n, n))
    hess = m @ m.T + n * np.eye(n)
    pairs = []
    for _ in range(3):
        s = rng.normal(size=n)
        y = hess @ s
        pairs.append((torch.tensor(s), torch.tensor(y), 1.0 / float(s @ y)))
    gamma = float(pairs[-1][0] @ pairs[-1][1] / (pairs[-1][1] @ pairs[-1][1]))
    h = gamma * np.eye(n)
    for s, y, rho in pairs:
        s, y = s.numpy(), y.numpy()
        left = np.eye(n) - rho * np.outer(s, y)
        h = left @ h @ left.T + rho * np.outer(s, s)
    g = rng.normal(size=n)
    np.testing.assert_allclose(two_loop(torch.tensor(g), pairs, gamma).numpy(), h @ g,
                               rtol=1e-10)


def test_max_iter_and_max_eval_are_respected() -> None:
    x0 = torch.tensor([-1.2, 1.0], dtype=torch.float64)
    f = Counted(rosenbrock)
    res = minimize_lbfgs(f, x0, max_iter=3, max_eval=100)
    assert (res.iterations, res.stop) == (3, "max_iter")
    assert res.evaluations == f.calls
    assert res.value < rosenbrock(x0)[0]  # every iteration went down
    f = Counted(rosenbrock)
    res = minimize_lbfgs(f, x0, max_iter=1000, max_eval=10, tolerance_grad=0.0,
                         tolerance_change=0.0)
    assert res.stop == "max_eval"
    # checked after each iteration: at most one line search (25 evaluations) over
    assert 10 <= res.evaluations == f.calls < 10 + 25
    # the default cap, max_iter * 5 // 4 (torch's): 3 evaluations for 3 iterations
    res = minimize_lbfgs(rosenbrock, x0, max_iter=3)
    assert res.stop == "max_eval" and res.evaluations >= 3


def test_an_optimal_start_returns_at_once() -> None:
    x0 = torch.tensor(X_STAR, dtype=torch.float64)
    f = Counted(quadratic)
    res = minimize_lbfgs(f, x0, max_iter=50, tolerance_grad=1e-9)
    assert (res.iterations, res.evaluations, f.calls, res.stop) == (0, 1, 1, "gradient")
    assert torch.equal(res.x, x0)


def test_a_loose_tolerance_change_stops_early() -> None:
    x0 = torch.tensor([-1.2, 1.0], dtype=torch.float64)
    tight = minimize_lbfgs(rosenbrock, x0, max_iter=500, tolerance_grad=1e-10,
                           tolerance_change=1e-14)
    loose = minimize_lbfgs(rosenbrock, x0, max_iter=500, tolerance_grad=1e-10,
                           tolerance_change=1e-2)
    assert loose.stop in ("change", "step")
    assert loose.iterations < tight.iterations


def test_a_nan_value_is_stepped_back_from() -> None:
    """A trial step whose value is NaN fails sufficient decrease: the line search
    shrinks the step instead of taking it."""
    trials = []

    def barrier(x: torch.Tensor) -> tuple[float, torch.Tensor]:
        # -log(1 - x) - 3x: minimum at 1/(1 - x) = 3, x = 2/3; NaN from x = 1 on
        v = float(x[0])
        trials.append(v)
        if v >= 1:
            return float("nan"), torch.full_like(x, float("nan"))
        return -np.log(1 - v) - 3 * v, torch.tensor([1 / (1 - v) - 3], dtype=x.dtype)

    for start in (0.0, -2.0):
        trials.clear()
        res = minimize_lbfgs(barrier, torch.tensor([start], dtype=torch.float64),
                             max_iter=100, tolerance_grad=1e-10, tolerance_change=1e-14)
        assert any(v >= 1 for v in trials)  # a NaN was met on the way
        assert float(res.x[0]) == pytest.approx(2 / 3, abs=1e-8)
        assert res.value == pytest.approx(np.log(3) - 2, abs=1e-12)


def logistic_objective(x: np.ndarray, y: np.ndarray, classes: int, wd: float,
                       theta: np.ndarray) -> tuple[float, np.ndarray]:
    """fit_logistic's objective in float64 numpy, theta = (W (d x classes) flat, b)."""
    n, d = x.shape
    w, b = theta[: d * classes].reshape(d, classes), theta[d * classes :]
    z = x @ w + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    value = -np.mean(np.log(p[np.arange(n), y])) + 0.5 * wd * np.sum(w * w)
    p[np.arange(n), y] -= 1.0
    return value, np.concatenate([(x.T @ p / n + wd * w).ravel(), p.sum(axis=0) / n])


@pytest.mark.parametrize(("classes", "wd"), [(3, 1e-2), (5, 1e-3)])
def test_fit_logistic_against_scipy_l_bfgs_b(classes: int, wd: float) -> None:
    from scipy.optimize import minimize

    rng = np.random.default_rng(classes)
    n, d = 300, 8
    centres = rng.normal(size=(classes, d))
    y = rng.integers(0, classes, size=n)
    x = (centres[y] + 1.5 * rng.normal(size=(n, d))).astype(np.float32)
    x64 = x.astype(np.float64)
    ref = minimize(lambda t: logistic_objective(x64, y, classes, wd, t),
                   np.zeros(d * classes + classes), jac=True, method="L-BFGS-B",
                   options={"maxiter": 10_000, "gtol": 1e-12, "ftol": 1e-15})
    w, b = fit_logistic(x, y, classes, wd, max_iter=500, tolerance=1e-9)
    ours = logistic_objective(x64, y, classes, wd,
                              np.concatenate([w.ravel(), b]).astype(np.float64))[0]
    assert ours == pytest.approx(ref.fun, abs=1e-6)
    # a strictly convex objective (the softmax's shared shift is fixed by the penalty
    # on W; b's shift is free, so compare logits less their mean)
    w_ref = ref.x[: d * classes].reshape(d, classes)
    b_ref = ref.x[d * classes :]
    z, z_ref = x64 @ w + b, x64 @ w_ref + b_ref
    np.testing.assert_allclose(z - z.mean(1, keepdims=True),
                               z_ref - z_ref.mean(1, keepdims=True), atol=2e-3)


def test_fit_logistic_warm_start_at_the_optimum_stays_there() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=200)
    w, b = fit_logistic(x, y, 3, 1e-2, max_iter=500, tolerance=1e-6)
    w2, b2 = fit_logistic(x, y, 3, 1e-2, max_iter=500, tolerance=1e-6, init=(w, b))
    np.testing.assert_allclose(x @ w2 + b2, x @ w + b, atol=1e-4)
    assert w2.dtype == b2.dtype == np.float32 and w2.shape == (6, 3) and b2.shape == (3,)


def run_for_modules(code: str, *args: str) -> list[str]:
    """Run ``code`` in a fresh interpreter from the repository (so other tests' imports
    don't count); its stdout's lines."""
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()


def test_the_probe_does_not_import_dynamo() -> None:
    code = ("import sys\nimport numpy as np\n"
            "from pairkit.eval.linear_probe import fit_logistic\n"
            "rng = np.random.default_rng(0)\n"
            "w, b = fit_logistic(rng.normal(size=(50, 4)), rng.integers(0, 3, 50), 3, 1e-3)\n"
            "print('torch' in sys.modules, np.isfinite(w).all())\n"
            "print('dynamo' if 'torch._dynamo' in sys.modules else 'no dynamo')\n")
    lines = run_for_modules(code)
    assert lines[-2] == "True True"  # the fit ran in torch
    assert lines[-1] == "no dynamo"


def test_eval_with_a_linear_probe_does_not_import_dynamo(tmp_path: Path) -> None:
    random_store(tmp_path / "store")
    code = ("import json, runpy, sys\n"
            "sys.argv = ['pairkit', 'eval', sys.argv[1], '--json', '-q']\n"
            "try:\n    runpy.run_module('pairkit', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print()\n"
            "print('dynamo' if 'torch._dynamo' in sys.modules else 'no dynamo')\n")
    lines = run_for_modules(code, str(tmp_path / "store"))
    assert lines[-1] == "no dynamo"
    metrics = json.loads(next(line for line in lines if line.startswith("{")))
    assert "linear_top1" in metrics
