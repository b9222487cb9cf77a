"""AdamW (Loshchilov & Hutter 2019, *Decoupled Weight Decay Regularization*, ICLR) for
the head's few parameter tensors, without ``torch.optim``.

Why not ``torch.optim.AdamW``: every ``torch.optim.Optimizer`` imports ``torch._dynamo``
on its first use (its methods are wrapped to keep them out of ``torch.compile``), about
2 s of a CPU's time per ``pairkit train``, more than the epochs of a small run. This
class does what torch's single-tensor AdamW does, operation for operation (so its steps
are bit-identical to it on the CPU, tests/train/test_adamw.py), and its ``state_dict``
has torch's layout: checkpoints written before load into it, and its own load into
``torch.optim.AdamW``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class AdamW:
    """``torch.optim.AdamW(params, lr, betas, eps, weight_decay)``'s update, one group.

    ``param_groups[0]["lr"]`` may be changed between steps (the learning-rate schedule);
    ``zero_grad``, ``step``, ``state_dict`` and ``load_state_dict`` are torch's. Works with
    ``torch.amp.GradScaler`` (which reads ``param_groups`` and calls ``step``)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2) -> None:
        plist = list(params)
        if not plist:
            raise ValueError("AdamW got an empty parameter list")
        if min(lr, eps, weight_decay) < 0.0 or any(x != x for x in (lr, eps, weight_decay)):
            raise ValueError(f"AdamW: lr {lr}, eps {eps}, weight_decay {weight_decay} "
                             "must be >= 0")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"AdamW: betas {betas} must be in [0, 1)")
        self.param_groups: list[dict[str, Any]] = [{
            "params": plist, "lr": lr, "betas": tuple(betas), "eps": eps,
            "weight_decay": weight_decay, "amsgrad": False, "maximize": False,
            "foreach": None, "capturable": False, "differentiable": False, "fused": None,
            "decoupled_weight_decay": True}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, (beta1, beta2) = group["lr"], group["betas"]
        eps, weight_decay = group["eps"], group["weight_decay"]
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("AdamW does not support sparse gradients")
            st = self.state.get(p)
            if st is None:  # torch's first step: a float32 step count on the CPU
                st = self.state[p] = {
                    "step": torch.tensor(0.0, dtype=torch.float32),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
            grad, exp_avg, exp_avg_sq = p.grad, st["exp_avg"], st["exp_avg_sq"]
            st["step"] += 1
            if weight_decay != 0:
                p.mul_(1 - lr * weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step = st["step"].item()
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            step_size = lr / bias_correction1
            denom = (exp_avg_sq.sqrt() / bias_correction2 ** 0.5).add_(eps)
            p.addcdiv_(exp_avg, denom, value=-step_size)

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: per-parameter state by the parameter's position, the groups
        with their options and the positions of their parameters."""
        group = self.param_groups[0]
        params = group["params"]
        state = {i: dict(self.state[p]) for i, p in enumerate(params) if p in self.state}
        options = {k: v for k, v in group.items() if k != "params"}
        return {"state": state, "param_groups": [{**options,
                                                  "params": list(range(len(params)))}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load torch's layout (this class's or ``torch.optim.AdamW``'s). ValueError,
        KeyError or TypeError when it does not fit these parameters."""
        groups = state_dict["param_groups"]
        params = self.param_groups[0]["params"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(params):
            raise ValueError("loaded state dict has a different number of parameter groups "
                             "or parameters")
        saved = groups[0]
        new_state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        for pos, key in enumerate(saved["params"]):
            entry = state_dict["state"].get(key)
            if entry is None:
                continue
            p = params[pos]
            moments = {}
            for name in ("exp_avg", "exp_avg_sq"):
                value = entry[name]
                if not isinstance(value, torch.Tensor) or value.shape != p.shape:
                    raise ValueError(f"loaded {name} of parameter {pos} does not fit its "
                                     f"shape {tuple(p.shape)}")
                moments[name] = value.to(device=p.device, dtype=p.dtype).clone()
            step = torch.as_tensor(entry["step"], dtype=torch.float32).detach().clone().cpu()
            new_state[p] = {"step": step, **moments}
        options = {k: v for k, v in saved.items() if k != "params"}
        for k in ("lr", "betas", "eps", "weight_decay"):
            if k not in options:
                raise KeyError(k)
        options["betas"] = tuple(options["betas"])
        self.param_groups[0].update(options)
        self.state = new_state
