"""pairkit's AdamW against torch.optim.AdamW: the same steps to the bit on the CPU, the
same state_dict layout both ways, GradScaler, damaged states refused; and a `train` run
that never imports torch._dynamo (the reason the class exists)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pairkit.train.adamw import AdamW
from tests.conftest import random_store


def model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


def run(m: torch.nn.Module, opt: object, steps: int, lrs: list[float] | None = None,
        seed: int = 1) -> list[float]:
    g = torch.Generator().manual_seed(seed)
    losses = []
    for k in range(steps):
        if lrs is not None:
            for group in opt.param_groups:  # type: ignore[attr-defined]
                group["lr"] = lrs[k]
        x = torch.randn(8, 6, generator=g)
        loss = (m(x) ** 2).mean() + m(x).sum() * 0.1
        opt.zero_grad(set_to_none=True)  # type: ignore[attr-defined]
        loss.backward()
        opt.step()  # type: ignore[attr-defined]
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("weight_decay", [0.0, 0.05, 1e-4])
def test_steps_are_torchs_to_the_bit(weight_decay: float) -> None:
    ours, theirs = model(), model()
    lrs = [1e-3 * (1 + k % 3) for k in range(25)]  # a schedule: lr changed between steps
    a = run(ours, AdamW(ours.parameters(), lr=1e-3, weight_decay=weight_decay), 25, lrs)
    b = run(theirs, torch.optim.AdamW(theirs.parameters(), lr=1e-3,
                                      weight_decay=weight_decay), 25, lrs)
    assert a == b
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_parameter_without_a_gradient_is_left_alone() -> None:
    m = model()
    frozen = torch.nn.Parameter(torch.ones(3))
    opt = AdamW([*m.parameters(), frozen], lr=0.1, weight_decay=0.5)
    run(m, opt, 3)
    assert torch.equal(frozen, torch.ones(3))  # no decay either, as torch
    assert frozen not in opt.state


def test_hand_computed_first_step() -> None:
    # step 1: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2:
    # p <- p (1 - lr wd) - lr g / (|g| + eps)
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = AdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = torch.tensor([0.5, -4.0])
    opt.step()
    want = np.array([1.0, -2.0]) * (1 - 0.1 * 0.5) - 0.1 * np.sign([0.5, -4.0])
    assert np.allclose(p.detach().numpy(), want, atol=1e-6)


def test_state_dict_loads_both_ways() -> None:
    ours, theirs = model(), model()
    o1 = AdamW(ours.parameters(), lr=2e-3, weight_decay=0.01)
    t1 = torch.optim.AdamW(theirs.parameters(), lr=2e-3, weight_decay=0.01)
    run(ours, o1, 5)
    run(theirs, t1, 5)
    sd_ours, sd_theirs = o1.state_dict(), t1.state_dict()
    assert set(sd_ours) == set(sd_theirs) == {"state", "param_groups"}
    assert set(sd_ours["state"]) == set(sd_theirs["state"])
    for i, st in sd_theirs["state"].items():
        assert set(sd_ours["state"][i]) == set(st)
        for k, v in st.items():
            assert torch.equal(sd_ours["state"][i][k], v), k
            assert sd_ours["state"][i][k].dtype == v.dtype
    assert sd_ours["param_groups"][0]["params"] == sd_theirs["param_groups"][0]["params"]

    # torch's checkpoint (a run saved before this class) resumed by ours, and ours by torch
    a, b = copy.deepcopy(theirs), copy.deepcopy(theirs)
    o2 = AdamW(a.parameters(), lr=1.0, weight_decay=0.0)
    o2.load_state_dict(copy.deepcopy(sd_theirs))
    assert o2.param_groups[0]["lr"] == 2e-3 and o2.param_groups[0]["weight_decay"] == 0.01
    t2 = torch.optim.AdamW(b.parameters(), lr=1.0)
    t2.load_state_dict(copy.deepcopy(o1.state_dict()))
    t3 = torch.optim.AdamW(theirs.parameters(), lr=2e-3, weight_decay=0.01)
    t3.load_state_dict(sd_theirs)
    assert run(a, o2, 4, seed=7) == run(theirs, t3, 4, seed=7)
    c = copy.deepcopy(ours)
    o3 = AdamW(c.parameters())
    o3.load_state_dict(o1.state_dict())
    assert run(c, o3, 4, seed=9) == run(ours, o1, 4, seed=9)


def test_a_state_that_does_not_fit_is_refused() -> None:
    m = model()
    opt = AdamW(m.parameters(), lr=1e-3)
    run(m, opt, 2)
    good = opt.state_dict()
    other = AdamW(model().parameters())
    fewer = copy.deepcopy(good)
    fewer["param_groups"][0]["params"] = fewer["param_groups"][0]["params"][:-1]
    with pytest.raises(ValueError):
        other.load_state_dict(fewer)
    wrong = copy.deepcopy(good)
    wrong["state"][0]["exp_avg"] = torch.zeros(2, 2)
    with pytest.raises(ValueError):
        other.load_state_dict(wrong)
    no_lr = copy.deepcopy(good)
    del no_lr["param_groups"][0]["lr"]
    with pytest.raises(KeyError):
        other.load_state_dict(no_lr)
    before = {k: v.clone() for k, v in other.state_dict()["state"].items()} if other.state else {}
    assert before == {}  # a refused load leaves the optimizer as it was
    assert other.param_groups[0]["lr"] == 1e-3


def test_options_out_of_range_are_refused() -> None:
    p = [torch.nn.Parameter(torch.zeros(2))]
    for bad in ({"lr": -1.0}, {"eps": -1e-8}, {"weight_decay": -0.1}, {"betas": (1.0, 0.9)}):
        with pytest.raises(ValueError):
            AdamW(p, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        AdamW([])


def test_grad_scaler_steps_it_as_torchs() -> None:
    ours, theirs = model(), model()
    o, t = AdamW(ours.parameters(), lr=1e-2), torch.optim.AdamW(theirs.parameters(), lr=1e-2)
    for m, opt in ((ours, o), (theirs, t)):
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
        g = torch.Generator().manual_seed(3)
        for _ in range(4):
            loss = (m(torch.randn(8, 6, generator=g)) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(p, q)


def test_train_does_not_import_dynamo(tmp_path: Path) -> None:
    random_store(tmp_path / "store")
    head = tmp_path / "head"
    probe = ("import runpy, sys\n"
             "sys.argv = ['pairkit', 'train', sys.argv[1], '-o', sys.argv[2], '--epochs', '2',"
             " '--relation', 'instance', '-q']\n"
             "try:\n    runpy.run_module('pairkit', run_name='__main__')\n"
             "except SystemExit as e:\n    assert not e.code, e.code\n"
             "print('dynamo' if 'torch._dynamo' in sys.modules else 'no dynamo')\n")
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "store"), str(head)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert (head / "config.json").exists()
    assert out.stdout.strip().splitlines()[-1] == "no dynamo"
