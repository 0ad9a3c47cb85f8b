"""Adam on one flat parameter tensor, step for step ``torch.optim.Adam``'s CPU path.

PPO keeps every parameter as a view into one flat tensor, so the optimizer steps one tensor.
``torch.optim.Adam``'s constructor imports ``torch._dynamo`` (0.95 s on the 2-core development
VM: a third of a process's start-up, and `cartpole` trains to 475 in under 4 s). This class is
the arithmetic of ``torch.optim.adam._single_tensor_adam`` (the path torch takes for CPU
tensors; no weight decay, amsgrad or maximize) and its ``state_dict`` is ``torch.optim.Adam``'s
format, so checkpoints written with either load in the other. ``tests/algorithms/test_adam.py``
holds the two bitwise equal over many steps, learning-rate changes and a save/load.
"""

from __future__ import annotations

from typing import Any

import torch


class FlatAdam:
    def __init__(
        self,
        param: torch.Tensor,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.param = param
        self.param_groups: list[dict[str, Any]] = [
            {
                "lr": lr,
                "betas": betas,
                "eps": eps,
                "weight_decay": 0,
                "amsgrad": False,
                "maximize": False,
                "foreach": None,
                "capturable": False,
                "differentiable": False,
                "fused": None,
                "decoupled_weight_decay": False,
            }
        ]
        self.state: dict[int, dict[str, torch.Tensor]] = {}
        """As ``torch.optim.Adam.state`` keyed by parameter index: step, exp_avg, exp_avg_sq
        (empty before the first step)."""

    @torch.no_grad()
    def step(self) -> None:
        group, p = self.param_groups[0], self.param
        grad = p.grad
        if grad is None:
            return
        if not self.state:
            self.state[0] = {
                "step": torch.tensor(0.0, dtype=torch.float32),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
        s = self.state[0]
        beta1, beta2 = group["betas"]
        s["step"] += 1
        s["exp_avg"].lerp_(grad, 1 - beta1)
        s["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = s["step"].item()
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = group["lr"] / bias_correction1
        denom = (s["exp_avg_sq"].sqrt() / bias_correction2**0.5).add_(group["eps"])
        p.addcdiv_(s["exp_avg"], denom, value=-step_size)

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam.state_dict()``'s layout (the tensors themselves, not copies)."""
        groups = [{**g, "params": [0]} for g in self.param_groups]
        return {"state": {k: dict(v) for k, v in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a ``state_dict`` of this class or of ``torch.optim.Adam`` over one parameter."""
        groups = state["param_groups"]
        if len(groups) != 1 or list(groups[0].get("params", [0])) != [0]:
            raise ValueError(
                f"optimizer state for {len(groups)} parameter groups / params "
                f"{[g.get('params') for g in groups]}; expected one group of one flat parameter"
            )
        self.param_groups[0].update({k: v for k, v in groups[0].items() if k != "params"})
        self.param_groups[0]["betas"] = tuple(self.param_groups[0]["betas"])
        self.state = {}
        saved = state["state"].get(0, state["state"].get("0"))
        if saved:
            p = self.param
            self.state[0] = {
                "step": saved["step"].detach().clone().to(torch.float32).cpu(),
                "exp_avg": saved["exp_avg"].detach().clone().to(p.device, p.dtype),
                "exp_avg_sq": saved["exp_avg_sq"].detach().clone().to(p.device, p.dtype),
            }
