"""Preallocated rollout storage [T, N] on the rank's device, and the minibatch index sampler."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

WINDOW = 100
"""Episode statistics are over each collector's last 100 completed episodes (SB3's convention):
its window is [WINDOW, 3] rows of (return, length, completion key), key -1 for an empty slot."""


@dataclass
class Batch:
    """A flat view [B, ...] of a rollout, what the PPO update consumes."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    starts: torch.Tensor
    """[B] bool: an episode starts at this row (the recurrent memory is zeroed before it)."""

    def __len__(self) -> int:
        return self.obs.shape[0]

    def index(self, idx: torch.Tensor) -> Batch:
        """Rows ``idx`` (1-D) of every field. ``index_select`` copies the same rows as ``t[idx]``
        at about a third of the time on CPU (advanced indexing takes the general TensorIterator
        path); the minibatch gathers were most of `bench roofline`'s "other" phase."""
        return Batch(*(getattr(self, f).index_select(0, idx) for f in _FIELDS))


_FIELDS = ("obs", "actions", "logprobs", "values", "advantages", "returns", "starts")


class RolloutBuffer:
    """Holds T steps of N envs. Raw observations are stored (uint8 images stay uint8); the
    policy normalizes internally. For a recurrent policy it also holds each env's memory before
    the rollout's first step (``memory`` [N, slots, H]; [N, 0, 0] without one) and where
    episodes start (``starts`` [T, N]): enough to replay every env's sequence in the update."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_dim: int,
        action_shape: tuple[int, ...],
        discrete: bool,  # integer actions (discrete or multi_discrete): int64
        device: torch.device,
        obs_dtype: torch.dtype = torch.float32,
        memory_shape: tuple[int, ...] = (0, 0),
    ):
        T, N = num_steps, num_envs
        z: dict[str, Any] = dict(device=device)
        self.num_steps, self.num_envs = T, N
        self.obs = torch.zeros(T, N, obs_dim, dtype=obs_dtype, **z)
        self.memory = torch.zeros(N, *memory_shape, **z)
        self.starts = torch.zeros(T, N, dtype=torch.bool, **z)
        self.actions = torch.zeros(
            T, N, *action_shape, dtype=torch.long if discrete else torch.float32, **z
        )
        self.logprobs = torch.zeros(T, N, **z)
        self.values = torch.zeros(T, N, **z)
        self.rewards = torch.zeros(T, N, **z)
        self.terminated = torch.zeros(T, N, dtype=torch.bool, **z)
        self.truncated = torch.zeros(T, N, dtype=torch.bool, **z)
        self.final_values = torch.zeros(T, N, **z)
        self.advantages = torch.zeros(T, N, **z)
        self.returns = torch.zeros(T, N, **z)

    def flat(self) -> Batch:
        B = self.num_steps * self.num_envs
        return Batch(
            self.obs.view(B, -1),
            self.actions.view(B, *self.actions.shape[2:]),
            self.logprobs.view(B),
            self.values.view(B),
            self.advantages.view(B),
            self.returns.view(B),
            self.starts.view(B),
        )

    def head(self, steps: int) -> RolloutBuffer:
        """The first ``steps`` steps as a buffer of views (no copy): a rollout cut short (DD-PPO's
        preemption); the buffer itself when ``steps`` is all of them."""
        if steps == self.num_steps:
            return self
        out = copy.copy(self)
        for name in _TIME_MAJOR:
            setattr(out, name, getattr(self, name)[:steps])
        out.num_steps = steps
        return out


_TIME_MAJOR = (
    *("obs", "starts", "actions", "logprobs", "values", "rewards", "terminated", "truncated"),
    *("final_values", "advantages", "returns"),
)


def _block_size(num_envs: int, blocks: int) -> int:
    if num_envs % blocks:
        raise ValueError(f"{num_envs} envs do not split into {blocks} equal blocks")
    return num_envs // blocks


def minibatch_indices(
    num_steps: int,
    num_envs: int,
    num_minibatches: int,
    generator: torch.Generator,
    blocks: int = 1,
) -> list[torch.Tensor]:
    """Shuffle a flat [T*N] batch (flat index t*N + n) into ``num_minibatches`` index tensors.

    ``blocks`` views the N envs as ``blocks`` equal groups and shuffles each group with the same
    permutation; minibatch j is the union of every group's j-th slice. With blocks=W, one process
    holding W*N envs forms exactly the global minibatches that W ranks of N envs form together
    (each rank shuffling its own batch with the same generator). The equivalence tests rely on it.
    """
    nb = _block_size(num_envs, blocks)
    local = num_steps * nb
    # on the generator's device: on a GPU's batch a CPU permutation of 2M indices took 55 ms of
    # a 440 ms iteration (65,536 envs x 32 steps, H100), plus its copy to the device
    perm = torch.randperm(local, generator=generator, device=generator.device)
    mb = local // num_minibatches
    if blocks > 1:
        # local index i = t*nb + n  ->  flat index of block b = t*N + b*nb + n
        perm = (perm // nb) * num_envs + perm % nb
    offsets = torch.arange(blocks, device=perm.device).unsqueeze(1) * nb
    return [
        (perm[j * mb : (j + 1) * mb].unsqueeze(0) + offsets).reshape(-1)
        for j in range(num_minibatches)
    ]


def sequence_minibatches(
    num_steps: int,
    num_envs: int,
    num_minibatches: int,
    generator: torch.Generator,
    blocks: int = 1,
) -> list[torch.Tensor]:
    """Minibatches of whole env sequences for a recurrent policy: the envs are shuffled and
    split into ``num_minibatches`` groups; a minibatch holds every step of its envs, as flat
    indices t*N + n in time-major order ([T, n] flattened), so its first n entries are the envs
    themselves (the rows of ``RolloutBuffer.memory`` to start from). ``blocks``: as in
    ``minibatch_indices``, each of W equal groups of envs is shuffled with the same
    permutation, so W ranks of N envs form together the minibatches of one process of W*N."""
    nb = _block_size(num_envs, blocks)
    if nb % num_minibatches:
        raise ValueError(
            f"a recurrent policy trains on minibatches of whole env sequences: the {nb} envs "
            f"per rank do not split into --agent.num-minibatches {num_minibatches}; make the "
            f"envs per rank a multiple of it"
        )
    perm = torch.randperm(nb, generator=generator, device=generator.device)
    mb = nb // num_minibatches
    offsets = torch.arange(blocks, device=perm.device).unsqueeze(1) * nb
    steps = torch.arange(num_steps, device=perm.device).unsqueeze(1) * num_envs
    return [
        (steps + (perm[j * mb : (j + 1) * mb].unsqueeze(0) + offsets).reshape(1, -1)).reshape(-1)
        for j in range(num_minibatches)
    ]
