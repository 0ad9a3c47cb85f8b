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
  multi-input  for observations of several parts (a Gymnasium Dict: ``envs.core.ObsLayout``),
               as Stable-Baselines3's MultiInputPolicy (its CombinedExtractor): a CNN per image
               part (the nature-cnn's convolutions and 256 units for images of at least 36x36,
               minatar-cnn's conv and 128 units below that; pixels scaled by 1/255), the vector
               parts' float32 values (read back from their bytes) beside the CNN features; then
               the ``--policy.actor-hidden``/``--policy.critic-hidden`` MLPs as heads (SB3's
               default [64, 64] tanh). An image-only env works too (one image part).

nature-cnn and minatar-cnn feed linear actor and critic heads (gains 0.01 and 1, as CleanRL),
sharing the trunk.

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

from distrl.envs.core import ObsLayout


def _init(layer: nn.Module, gain: float = math.sqrt(2.0)) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)  # type: ignore[arg-type]
    nn.init.zeros_(layer.bias)  # type: ignore[arg-type]
    return layer


class ChannelLayerNorm(nn.Module):
    """LayerNorm over the channels of each position of [N, C, H, W] maps (Flax's
    ``nn.LayerNorm`` on NHWC, as PQN's MinAtar network applies it after its convolution)."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvEncoder(nn.Module):
    """uint8 (or float) rows [N, C*H*W] -> features [N, out]: convolutions with ReLU, a
    flatten, one linear layer with ReLU. ``convs``: (channels, kernel, stride) per layer.
    ``layer_norm``: a LayerNorm before each ReLU (over the channels after a convolution), as
    PQN's MinAtar and Atari networks (Gallici et al. 2025; ``--policy.layer-norm``)."""

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        convs: tuple[tuple[int, int, int], ...],
        out: int,
        scale: float,
        layer_norm: bool = False,
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
            norm: list[nn.Module] = [ChannelLayerNorm(channels)] if layer_norm else []
            layers += [_init(nn.Conv2d(c, channels, kernel, stride)), *norm, nn.ReLU()]
            c, h, w = channels, (h - kernel) // stride + 1, (w - kernel) // stride + 1
        norm = [nn.LayerNorm(out)] if layer_norm else []
        layers += [nn.Flatten(), _init(nn.Linear(c * h * w, out)), *norm, nn.ReLU()]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.obs_shape).float()
        if self.scale != 1.0:
            x = x * self.scale
        return self.net(x)


def nature_cnn(obs_shape: tuple[int, ...], layer_norm: bool = False) -> nn.Module:
    convs = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
    return ConvEncoder(obs_shape, convs, 512, 1.0 / 255.0, layer_norm)


def minatar_cnn(obs_shape: tuple[int, ...], layer_norm: bool = False) -> nn.Module:
    return ConvEncoder(obs_shape, ((16, 3, 1),), 128, 1.0, layer_norm)


NATURE_MIN_SIDE = 36
"""The smallest image side nature-cnn's convolutions take (8/4, 4/2, 3/1 leave 1x1 at 36)."""


class MultiInputEncoder(nn.Module):
    """Rows of several parts (``ObsLayout``: uint8 bytes, images first, then the vectors'
    float32 bytes) -> features [N, sum of the image CNNs' outputs + vector entries]."""

    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        if isinstance(obs_shape, ObsLayout):
            layout = obs_shape
        elif len(obs_shape) == 3:  # one image, the whole row
            layout = ObsLayout.of([("image", "image", tuple(obs_shape))])
        else:
            raise ValueError(
                f"--policy.network multi-input takes Dict observations (images and vectors) or "
                f"images; this env's observations are vectors of shape {tuple(obs_shape)}: use "
                f"--policy.network mlp"
            )
        self.row_bytes = layout.nbytes
        images = [f for f in layout.fields if f.kind == "image"]
        vectors = [f for f in layout.fields if f.kind == "vector"]
        self.image_slices = [(f.offset, f.offset + f.nbytes) for f in images]
        cnns = []
        for f in images:
            _, h, w = f.shape
            if min(h, w) >= NATURE_MIN_SIDE:
                cnns.append(
                    ConvEncoder(f.shape, ((32, 8, 4), (64, 4, 2), (64, 3, 1)), 256, 1.0 / 255.0)
                )
            elif min(h, w) >= 3:
                cnns.append(ConvEncoder(f.shape, ((16, 3, 1),), 128, 1.0 / 255.0))
            else:
                raise ValueError(
                    f"observation key {f.key!r} is an image of {h}x{w}, smaller than the 3x3 "
                    f"convolution of multi-input's smallest CNN; make it a vector (a Box of "
                    f"float32) or register a network for it"
                )
        self.cnns = nn.ModuleList(cnns)
        # the vectors lie side by side at the end of the row (each a multiple of 4 bytes)
        start = vectors[0].offset if vectors else 0
        end = vectors[-1].offset + vectors[-1].nbytes if vectors else 0
        self.vector_bytes = (start, end)
        self.out_features = sum(c.out_features for c in cnns) + (end - start) // 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.uint8:
            raise ValueError(f"multi-input takes the env's uint8 rows, got {x.dtype}")
        feats = [cnn(x[:, a:b]) for cnn, (a, b) in zip(self.cnns, self.image_slices, strict=True)]
        a, b = self.vector_bytes
        if b > a:  # float32 values stored as their bytes (little-endian)
            feats.append(float32_from_bytes(x[:, a:b]))
        return torch.cat(feats, -1)


def float32_from_bytes(x: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 4k] holding k little-endian IEEE 754 float32 values each -> float32 [N, k],
    bit for bit what ``x.view(torch.float32)`` gives, in arithmetic that torch.jit.trace and the
    ONNX exporter take (they refuse a view to another dtype): value = (-1)^s x m x 2^e with the
    24-bit significand m (exact in float32) and e from the exponent bits."""
    b = x.reshape(x.shape[0], -1, 4).to(torch.int64)
    bits = b[..., 0] + b[..., 1] * 256 + b[..., 2] * 65536 + b[..., 3] * 16777216
    sign = 1.0 - 2.0 * (bits // 2147483648).to(torch.float32)
    exponent = (bits // 8388608) % 256
    mantissa = (bits % 8388608).to(torch.float32)
    normal = exponent > 0
    m = torch.where(normal, mantissa + 8388608.0, mantissa)
    e = torch.where(normal, exponent - 150, torch.full_like(exponent, -149)).to(torch.float32)
    value = sign * m * torch.pow(2.0, e)
    special = torch.where(mantissa == 0, sign * torch.inf, torch.nan)  # exponent bits all 1
    return torch.where(exponent == 255, special, value)


def multi_input(obs_shape: tuple[int, ...]) -> nn.Module:
    return MultiInputEncoder(obs_shape)


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
