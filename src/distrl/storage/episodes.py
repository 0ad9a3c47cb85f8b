"""Exactly ``data_batch_size`` whole episodes from ``num_parallel_envs`` envs, padded to [E, T].

The episodic collection of multi-task RLOO (RIPT on LIBERO, Tan et al. 2025): the init states of one
iteration come from the task's ``InitStateCursor``; each is used by ``K`` episodes (an RLOO
group), so ``E = len(init_indices) * K`` episodes are collected. Episode ``e`` starts from
``init_indices[e // K]`` and belongs to group ``e // K``.

The N env rows work through the episodes in order. A row whose episode ends takes the next
unstarted episode while any is left; otherwise it goes idle: it is still stepped (the batch is
one tensor), but nothing it produces is recorded, so no surplus episode is ever collected and
none is cut short. With N > E the rows past E are idle from the start.

With ``noise`` [E, T, ...] the policy is called as ``policy(obs, eps)``, eps [N, ...] each row's
draw for its episode's current step (``policy.distributions.powerlaw_noise``: exploration
correlated within an episode); idle rows get zeros.

Recording needs no boolean gather: idle rows write into a spare episode row E (scratch, dropped
at the end), so every step is a fixed-shape ``index_put``. The one host sync per step is the
count of finished episodes, which decides when to stop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from distrl.envs.episodic import EpisodicVecEnv

Policy = Callable[..., tuple[torch.Tensor, torch.Tensor]]
"""obs [N, obs_dim] (, eps [N, ...] when noise is given) -> (actions [N, ...], log-probabilities
[N]); called under no_grad."""


def step_mask(lengths: torch.Tensor, max_steps: int) -> torch.Tensor:
    """[E, T] bool: step t of episode e is real iff t < lengths[e]."""
    return torch.arange(max_steps, device=lengths.device) < lengths.unsqueeze(1)


@dataclass
class EpisodeBatch:
    """E episodes padded to T steps; step t of episode e is real iff t < lengths[e] (padded
    entries are zero)."""

    obs: torch.Tensor  # [E, T, obs_dim]
    actions: torch.Tensor  # [E, T, ...] as the policy returned them
    logprobs: torch.Tensor  # [E, T]
    rewards: torch.Tensor  # [E, T]
    lengths: torch.Tensor  # [E] int64, 1..T
    success: torch.Tensor  # [E] bool: info["success"] (else terminated) on the last step
    init_indices: torch.Tensor  # [E] int64: the init state each episode started from
    group_size: int  # K: episodes e and e' share a group iff e // K == e' // K
    env_steps: int  # rows stepped in total, idle ones included (N x number of steps)

    @property
    def num_episodes(self) -> int:
        return self.lengths.shape[0]

    @property
    def max_steps(self) -> int:
        return self.rewards.shape[1]

    @property
    def returns(self) -> torch.Tensor:
        """[E] undiscounted return of each episode."""
        return self.rewards.sum(1)

    @property
    def groups(self) -> torch.Tensor:
        """[E] group id of each episode (e // K)."""
        return torch.arange(self.num_episodes, device=self.lengths.device) // self.group_size

    @property
    def mask(self) -> torch.Tensor:
        """[E, T] bool: the real (unpadded) steps."""
        return step_mask(self.lengths, self.max_steps)


def group_rows(groups: torch.Tensor, group_size: int) -> torch.Tensor:
    """The episode rows [len(groups) * K] of groups ``groups`` (group g: rows g*K .. g*K+K-1)."""
    offsets = torch.arange(group_size, device=groups.device)
    return (groups.unsqueeze(1) * group_size + offsets).reshape(-1)


def replace_groups(batch: EpisodeBatch, groups: torch.Tensor, new: EpisodeBatch) -> None:
    """Put ``new``'s groups in place of ``batch``'s groups ``groups`` (one new group for each,
    in order), in place; ``batch.env_steps`` adds ``new``'s."""
    K = batch.group_size
    if new.group_size != K or new.num_episodes != len(groups) * K:
        raise ValueError(f"{new.num_episodes} episodes do not refill {len(groups)} groups of {K}")
    rows = group_rows(groups, K)
    for name in ("obs", "actions", "logprobs", "rewards", "lengths", "success", "init_indices"):
        getattr(batch, name)[rows] = getattr(new, name).to(getattr(batch, name).dtype)
    batch.env_steps += new.env_steps


def collect_episodes(
    env: EpisodicVecEnv,
    policy: Policy,
    init_indices: Sequence[int] | torch.Tensor,
    group_size: int,
    seed: int | None = None,
    noise: torch.Tensor | None = None,
) -> EpisodeBatch:
    """Run ``policy`` in ``env`` until exactly ``len(init_indices) * group_size`` episodes have
    ended, episode e from init state ``init_indices[e // group_size]``; T is the env's
    ``max_episode_steps``. ``seed`` seeds ``env.reset`` (the env's own randomness); ``noise``
    [E, T, ...] is handed to the policy step by step (module docstring)."""
    dev = env.device
    N, T = env.num_envs, env.max_episode_steps
    starts = torch.as_tensor(init_indices, dtype=torch.long, device=dev)
    if starts.dim() != 1 or starts.numel() == 0 or group_size < 1:
        raise ValueError(
            f"need a non-empty list of init indices and group_size >= 1, got "
            f"{tuple(starts.shape)} indices and group_size={group_size}"
        )
    E = starts.numel() * group_size
    if noise is not None:
        if noise.shape[:2] != (E, T):
            raise ValueError(
                f"noise must be [{E}, {T}, ...] (episodes, steps), got {tuple(noise.shape)}"
            )
        noise = torch.cat((noise.to(dev), noise.new_zeros((1, *noise.shape[1:])).to(dev)))
    # Init state of every episode, plus the scratch episode E (its start is never used).
    episode_start = torch.cat((starts.repeat_interleave(group_size), starts.new_zeros(1)))

    obs_buf = torch.zeros(E + 1, T, env.obs_dim, device=dev)
    logp_buf = torch.zeros(E + 1, T, device=dev)
    reward_buf = torch.zeros(E + 1, T, device=dev)
    lengths = torch.zeros(E + 1, dtype=torch.long, device=dev)
    success = torch.zeros(E + 1, dtype=torch.bool, device=dev)
    act_buf: torch.Tensor | None = None

    rows = torch.arange(N, device=dev)
    row_episode = torch.where(rows < E, rows, E)  # E marks an idle row
    row_step = torch.zeros(N, dtype=torch.long, device=dev)
    env.reset(seed)
    obs = env.reset_rows(row_episode < E, episode_start[row_episode])
    next_episode, finished, steps = min(N, E), 0, 0
    max_calls = (-(-E // min(N, E)) + 1) * T  # every row's episodes end within T steps

    with torch.no_grad():
        while finished < E:
            if steps >= max_calls:
                raise RuntimeError(
                    f"{type(env).__name__} ran {steps} steps without ending {E} episodes: its "
                    f"episodes must end within max_episode_steps={T}"
                )
            at = (row_episode, row_step.clamp_max(T - 1))  # idle rows write into episode E
            actions, logp = policy(obs) if noise is None else policy(obs, noise[at])
            if act_buf is None:
                act_buf = actions.new_zeros((E + 1, T, *actions.shape[1:]))
            obs_buf[at] = obs
            act_buf[at] = actions
            logp_buf[at] = logp
            obs, reward, terminated, truncated, info = env.step(actions)
            reward_buf[at] = reward
            row_step += 1
            steps += 1

            done = (terminated | truncated) & (row_episode < E)
            ended = torch.where(done, row_episode, E)
            lengths[ended] = row_step
            success[ended] = info.get("success", terminated)
            n_done = int(done.sum())  # the one host sync per step
            if n_done == 0:
                continue
            finished += n_done
            # Finished rows take the next episodes in row order while any are left.
            new_episode = next_episode + done.cumsum(0) - 1
            start = done & (new_episode < E)
            row_episode = torch.where(start, new_episode, torch.where(done, E, row_episode))
            row_step = torch.where(done, 0, row_step)
            next_episode = min(next_episode + n_done, E)
            obs = env.reset_rows(start, episode_start[row_episode])

    assert act_buf is not None  # at least one step ran (E >= 1)
    return EpisodeBatch(
        obs=obs_buf[:E],
        actions=act_buf[:E],
        logprobs=logp_buf[:E],
        rewards=reward_buf[:E],
        lengths=lengths[:E],
        success=success[:E],
        init_indices=episode_start[:E],
        group_size=group_size,
        env_steps=steps * N,
    )
