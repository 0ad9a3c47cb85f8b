"""One network per agent group (``--policy.mapping per-group``).

A multi-agent env with two groups of agents or more (``envs/pettingzoo_env.py``) starts each
observation row with its group's one-hot, K entries that the observation normalizer leaves as
they are. ``PerGroup`` holds one network per group and gives each row the output of its group's
network: every network runs on every row and ``torch.where`` picks, so a network's parameters
get gradients from its own group's rows only, and the routing has no data-dependent shapes (it
exports to ONNX as it trains). The extra compute is K times a small MLP's.
"""

from __future__ import annotations

import torch
from torch import nn


def group_index(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Each row's group [N, 1]: the one-hot in the first ``groups`` entries of ``x`` [N, D]."""
    return x[..., :groups].argmax(-1, keepdim=True)


class PerGroup(nn.Module):
    """``nets[g]`` for the rows of group ``g`` (module docstring)."""

    def __init__(self, nets: list[nn.Module]):
        super().__init__()
        if len(nets) < 2:
            raise ValueError(f"PerGroup needs two networks or more, got {len(nets)}")
        self.nets = nn.ModuleList(nets)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        group = group_index(x, len(self.nets))
        out = self.nets[0](x)
        for g in range(1, len(self.nets)):
            out = torch.where(group == g, self.nets[g](x), out)
        return out
