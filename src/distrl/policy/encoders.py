"""Encoders for image observations and the recurrent core: what sits between the observation
and the actor and critic heads when the observations are pixels or the task needs memory.

An encoder maps a batch of flat observation rows [N, obs_dim] (uint8 for images, in
``obs_shape`` = (C, H, W) order: ``envs/core.py``) to features [N, F]; it casts and scales the
bytes itself, so images stay uint8 in rollout storage and on the wire and are never put
through the running observation normalizer. Built in:

  nature-cnn   the DQN Nature network (Mnih et al. 2015) for 84x84 Atari frames, as CleanRL's
               ``ppo_atari`` uses it: conv 32x8x8/4, 64x4x4/2, 64x3x3/1, then 512 units;
               pixels scaled by 1/255
  minatar-cnn  MinAtar's network (Young & Tian 2019): conv 16x3x3/1, then 128 units; the
               grids are 0/1 already, so no scaling

Both feed linear actor and critic heads (gains 0.01 and 1, as CleanRL), sharing the trunk.

The recurrent core (``Recurrent``, ``--policy.recurrent lstm|gru``) follows the encoder (the
normalized observations for ``mlp``) and is shared by the heads. Its memory, [N, 2, H] for an
LSTM (h and c) or [N, 1, H] for a GRU, is carried across rollouts by the collector and set to
zero where an episode starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn


def _init(layer: nn.Module, gain: float = math.sqrt(2.0)) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)  # type: ignore[arg-type]
    nn.init.zeros_(layer.bias)  # type: ignore[arg-type]
    return layer


class ConvEncoder(nn.Module):
    """uint8 (or float) rows [N, C*H*W] -> features [N, out]: convolutions with ReLU, a
    flatten, one linear layer with ReLU. ``convs``: (channels, kernel, stride) per layer."""

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        convs: tuple[tuple[int, int, int], ...],
        out: int,
        scale: float,
    ):
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(
                f"a convolutional encoder takes image observations of shape (C, H, W); this "
                f"env's observations have shape {obs_shape}: use --policy.network mlp"
            )
        self.obs_shape, self.scale, self.out_features = tuple(obs_shape), scale, out
        layers: list[nn.Module] = []
        c, h, w = obs_shape
        for channels, kernel, stride in convs:
            if h < kernel or w < kernel:
                raise ValueError(
                    f"observations of shape {obs_shape} are too small for this network's "
                    f"{kernel}x{kernel} convolution (at {h}x{w}); pick a network for their size "
                    f"(nature-cnn: 84x84 Atari frames; minatar-cnn: 10x10 grids)"
                )
            layers += [_init(nn.Conv2d(c, channels, kernel, stride)), nn.ReLU()]
            c, h, w = channels, (h - kernel) // stride + 1, (w - kernel) // stride + 1
        layers += [nn.Flatten(), _init(nn.Linear(c * h * w, out)), nn.ReLU()]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.obs_shape).float()
        if self.scale != 1.0:
            x = x * self.scale
        return self.net(x)


def nature_cnn(obs_shape: tuple[int, ...]) -> nn.Module:
    return ConvEncoder(obs_shape, ((32, 8, 4), (64, 4, 2), (64, 3, 1)), 512, 1.0 / 255.0)


def minatar_cnn(obs_shape: tuple[int, ...]) -> nn.Module:
    return ConvEncoder(obs_shape, ((16, 3, 1),), 128, 1.0)


def linear_head(gain: float) -> Callable[..., nn.Module]:
    """A factory of one orthogonally initialized linear layer: features -> outputs."""

    def make(features: int, outputs: int = 1) -> nn.Module:
        return _init(nn.Linear(features, outputs), gain)

    return make


class Recurrent(nn.Module):
    """An LSTM or GRU cell stepped over a sequence, its memory zeroed where episodes start.

    Memory: [N, 2, H] (LSTM: h, c) or [N, 1, H] (GRU: h); the features it gives the heads are h.
    """

    def __init__(self, kind: str, in_features: int, hidden: int):
        super().__init__()
        if kind not in ("lstm", "gru"):
            raise ValueError(f"--policy.recurrent must be none, lstm or gru, got {kind!r}")
        self.kind, self.hidden = kind, hidden
        self.cell: nn.LSTMCell | nn.GRUCell = (
            nn.LSTMCell(in_features, hidden) if kind == "lstm" else nn.GRUCell(in_features, hidden)
        )
        for name, p in self.cell.named_parameters():  # as CleanRL's ppo_atari_lstm
            if "weight" in name:
                nn.init.orthogonal_(p, 1.0)
            else:
                nn.init.zeros_(p)
        self.out_features = hidden

    @property
    def slots(self) -> int:
        return 2 if self.kind == "lstm" else 1

    def initial(self, n: int, device: torch.device) -> torch.Tensor:
        return torch.zeros(n, self.slots, self.hidden, device=device)

    def step(self, x: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: features [N, F], memory [N, slots, H] -> (output [N, H], new memory)."""
        if self.kind == "lstm":
            h, c = self.cell(x, (memory[:, 0], memory[:, 1]))
            return h, torch.stack([h, c], 1)
        h = self.cell(x, memory[:, 0])
        return h, h.unsqueeze(1)

    def unroll(
        self, x: torch.Tensor, memory: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A sequence: features [T*N, F] (time-major rows), the memory before its first step
        [N, slots, H], ``starts`` [T*N] (an episode starts at that row: memory zeroed before it)
        -> (outputs [T*N, H], memory after the last step)."""
        n = memory.shape[0]
        xs, keep = x.view(-1, n, x.shape[-1]), (~starts).view(-1, n, 1, 1).to(memory.dtype)
        outs = []
        for t in range(xs.shape[0]):
            out, memory = self.step(xs[t], memory * keep[t])
            outs.append(out)
        return torch.cat(outs), memory
