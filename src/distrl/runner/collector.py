"""The collector role: step the envs with the current policy, fill the rollout buffer, keep the
episode bookkeeping (running returns and the window of recently completed episodes)."""

from __future__ import annotations

from typing import Any, Protocol

import torch

from distrl import seeding
from distrl.envs.core import VecEnv
from distrl.policy import ActorCritic, Moments
from distrl.storage.rollout import WINDOW, RolloutBuffer


class NonFiniteEnvError(RuntimeError):
    """An environment produced NaN/Inf; the message names rank, env index, step and field."""


class EnvStepError(RuntimeError):
    """``env.step`` raised; the message names rank, step and (when known) the env index, and the
    original exception is chained as ``__cause__``."""


class Collector:
    def __init__(
        self,
        env: VecEnv,
        policy: ActorCritic,
        num_steps: int,
        rank: int,
        seed: int,
        gamma: float = 0.99,
    ):
        self.env, self.policy, self.rank, self.gamma = env, policy, rank, gamma
        device = next(policy.parameters()).device
        N = env.num_envs
        self.buffer = rollout_buffer(env, policy, num_steps, N, device)
        self.obs = env.reset(seed=seed)
        # a recurrent policy's memory for the current observations (zero where an episode
        # starts), and which envs start an episode at the next step
        self.memory = policy.initial_memory(N)
        self.starts = torch.ones(N, dtype=torch.bool, device=device)
        if self.obs.device != device:
            raise ValueError(
                f"the env's reset() returned observations on {self.obs.device}, but the policy "
                f"trains on {device}: a VecEnv makes its tensors on the device make_env is given "
                f"(distrl.check_env tests this), or train with --device {self.obs.device}"
            )
        z: dict[str, Any] = dict(device=device)
        self.ep_return = torch.zeros(N, **z)
        self.ep_length = torch.zeros(N, **z)
        self.done_return = torch.zeros(num_steps, N, **z)
        self.done_length = torch.zeros(num_steps, N, **z)
        # where whole episodes ended (info["episode_end"]; else terminated | truncated)
        self.episode_end = torch.zeros(num_steps, N, dtype=torch.bool, **z)
        # window rows: (return, length, completion key); key -1 marks an empty slot
        self.window = torch.full((WINDOW, 3), -1.0, **z)
        self.last_rollout_time = 0.0
        self.steps = num_steps
        """Steps of the last rollout: fewer than num_steps where it was preempted."""
        self.preempt: Any = None
        """DD-PPO's preemption (``distributed.preemption.Preemption``): may end a rollout early."""
        # reward scaling (policy.reward_norm): each env's discounted return G, and G per step
        self.disc_return = torch.zeros(N, **z)
        steps = (num_steps, N) if policy.reward_norm else (0,)  # empty: no reward scaling
        self.disc_returns = torch.zeros(steps, **z)

    # ---- rollout ---------------------------------------------------------------------------
    @torch.inference_mode()  # cheaper per op than no_grad; writes into normal buffers are fine
    def rollout(self, iteration: int) -> None:
        buf, policy, env = self.buffer, self.policy, self.env
        scale, G = policy.reward_norm, self.disc_return
        obs, memory, recurrent = self.obs, self.memory, policy.recurrent
        if recurrent:
            buf.memory.copy_(memory)
        stop = self.preempt
        if stop is not None:
            stop.begin(iteration)
        t = 0
        for t in range(buf.num_steps):
            buf.starts[t] = self.starts
            actions, logp, value = policy.act(obs, memory=memory if recurrent else None)
            try:
                next_obs, reward, terminated, truncated, info = env.step(policy.env_action(actions))
            except Exception as e:
                raise EnvStepError(self._env_failure(iteration, t, e)) from e
            buf.obs[t] = obs
            buf.actions[t] = actions
            buf.logprobs[t] = logp
            buf.values[t] = value
            if scale is None:
                buf.rewards[t] = reward
            else:
                G.mul_(self.gamma).add_(reward)
                self.disc_returns[t] = G
                buf.rewards[t] = scale(reward)
            buf.terminated[t] = terminated
            buf.truncated[t] = truncated
            if truncated.any():  # rare; bootstrap from V(final obs), not from the reset state
                idx = truncated.nonzero().squeeze(-1)
                final_obs = info["final_obs"][idx]
                buf.final_values[t, idx] = policy.value(
                    final_obs, memory[idx] if recurrent else None
                )
            done = terminated | truncated
            self.starts = done
            if recurrent:
                memory.masked_fill_(done.view(-1, 1, 1), 0.0)
            # episode statistics: of the env's score and whole episodes where it gives them
            # (envs/core.py: Atari's raw score over games, not clipped rewards over lives)
            ended = info.get("episode_end", done)
            self.ep_return += info.get("score", reward)
            self.ep_length += 1
            self.done_return[t] = self.ep_return
            self.done_length[t] = self.ep_length
            self.episode_end[t] = ended
            self.ep_return.masked_fill_(ended, 0.0)
            self.ep_length.masked_fill_(ended, 0.0)
            if scale is not None:
                G.masked_fill_(done, 0.0)
            obs = next_obs
            if stop is not None and stop.now(t + 1):
                break
        self.obs = obs
        self.steps = t + 1
        if stop is not None and self.steps == buf.num_steps:
            stop.finished()

    @property
    def collected(self) -> RolloutBuffer:
        """The last rollout's steps: the buffer, or its first ``steps`` where it was cut."""
        return self.buffer.head(self.steps)

    def _env_failure(self, iteration: int, t: int, e: Exception) -> str:
        step = iteration * self.buffer.num_steps + t
        # Envs may say which sub-env failed (FaultyEnv does); Gymnasium's vector envs do not.
        index = getattr(e, "env_index", None)
        where = f" in env {index}" if index is not None else ""
        return (
            f"rank {self.rank}: env step {step} failed{where} (iteration {iteration}, "
            f"rollout step {t}): {type(e).__name__}: {e}"
        )

    def check_finite(self, iteration: int) -> None:
        """NaN/Inf from the env stops training here, before the update sees it."""
        buf = self.buffer
        fields = {"reward": buf.rewards}
        if buf.obs.is_floating_point():  # bytes (images) are always finite
            fields = {"observation": buf.obs, **fields}
        for name, x in fields.items():
            bad = ~torch.isfinite(x)
            if bad.any():
                while bad.dim() > 2:
                    bad = bad.any(-1)
                t, n = (int(v) for v in bad.nonzero()[0])
                if name == "observation":  # obs[t] was returned by the env at step t-1
                    t -= 1
                step = iteration * buf.num_steps + t
                raise NonFiniteEnvError(
                    f"rank {self.rank}: env {n} returned a non-finite {name} at step {step} "
                    f"(iteration {iteration}, rollout step {t}); the update was not run"
                )
        # a time limit's final observation is seen only through V(final_obs), where truncated
        final = (~torch.isfinite(buf.final_values)) & buf.truncated
        if final.any():
            t, n = (int(v) for v in final.nonzero()[0])
            step = iteration * buf.num_steps + t
            raise NonFiniteEnvError(
                f"rank {self.rank}: env {n} returned a non-finite final observation (info"
                f'["final_obs"] at a time limit) at step {step} (iteration {iteration}, '
                f"rollout step {t}); the update was not run"
            )
        if self.obs.is_floating_point() and not torch.isfinite(self.obs).all():
            n = int((~torch.isfinite(self.obs)).reshape(self.obs.shape[0], -1).any(-1).nonzero()[0])
            step = (iteration + 1) * buf.num_steps - 1
            raise NonFiniteEnvError(
                f"rank {self.rank}: env {n} returned a non-finite observation at step {step}"
            )

    # ---- what the rollout contributes to the agreed statistics ------------------------------
    def obs_moments(self) -> torch.Tensor:
        return obs_moments(self.collected)

    @property
    def scales_rewards(self) -> bool:
        return self.policy.reward_norm is not None

    def return_moments(self) -> torch.Tensor:
        """This rollout's discounted-return moments for the reward scale, flat float64 [3]."""
        return Moments.of(self.disc_returns[: self.steps].reshape(-1, 1)).to_flat()

    def episode_window(self, iteration: int) -> torch.Tensor:
        """Add the episodes that ended in this rollout to the window; returns it, [WINDOW, 3]
        rows of (return, length, completion key), the key ordering completions across ranks."""
        t = self.steps
        self.window = append_window(
            self.window,
            self.done_return[:t],
            self.done_length[:t],
            self.episode_end[:t],
            iteration,
            self.buffer.num_steps,
        )
        return self.window

    # ---- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What differs per rank: env state, RNG, current observation, episode bookkeeping."""
        return {
            **env_state(self),
            "disc_return": self.disc_return.cpu(),
            "memory": self.memory.cpu(),
            "starts": self.starts.cpu(),
        }

    def load_state_dict(self, s: dict[str, Any]) -> None:
        device = self.buffer.obs.device
        load_env_state(self, s, device)
        if "disc_return" in s:  # absent in checkpoints written before reward scaling existed
            self.disc_return = s["disc_return"].to(device)
        if "memory" in s:  # absent in checkpoints written before recurrent policies
            if s["memory"].shape != self.memory.shape:
                raise ValueError(
                    f"the checkpoint's recurrent memory has shape {tuple(s['memory'].shape)}, "
                    f"this policy's {tuple(self.memory.shape)}: resume with the saved run's "
                    f"--policy.recurrent, --policy.recurrent-hidden and --env.num-envs"
                )
            self.memory = s["memory"].to(device)
            self.starts = s["starts"].to(device)


class EnvSide(Protocol):
    """A collecting rank's env, current observation and episode bookkeeping."""

    env: VecEnv
    obs: torch.Tensor
    ep_return: torch.Tensor
    ep_length: torch.Tensor
    window: torch.Tensor


def env_state(side: EnvSide) -> dict[str, Any]:
    """The env's state, the RNG, the current observation, the running episodes and the window
    (a rank's own, in its checkpoint part)."""
    return {
        "env": side.env.state_dict(),
        "rng": seeding.capture_rng_state(),
        "obs": side.obs.cpu(),
        "ep_return": side.ep_return.cpu(),
        "ep_length": side.ep_length.cpu(),
        "window": side.window.cpu(),
    }


def load_env_state(side: EnvSide, s: dict[str, Any], device: torch.device) -> None:
    side.env.load_state_dict(s["env"])
    seeding.restore_rng_state(s["rng"])
    side.obs = s["obs"].to(device)
    side.ep_return = s["ep_return"].to(device)
    side.ep_length = s["ep_length"].to(device)
    side.window = s["window"].to(device)


class RolloutSource(Protocol):
    """What the learner role reads of a rollout: a ``Collector``'s own, or (learner-actor)
    ``RemoteRollouts``, the rollouts its actors sent."""

    buffer: RolloutBuffer
    obs: torch.Tensor
    """[N, obs_dim]: the observations after the rollout's last step (GAE bootstraps there)."""
    memory: torch.Tensor
    """[N, slots, H]: a recurrent policy's memory for ``obs`` ([N, 0, 0] without one)."""
    last_rollout_time: float

    @property
    def collected(self) -> RolloutBuffer:
        """What the last rollout filled: ``buffer``, or its first steps where it was cut short
        (DD-PPO's preemption)."""
        ...

    def obs_moments(self) -> torch.Tensor: ...

    def return_moments(self) -> torch.Tensor: ...

    def episode_window(self, iteration: int) -> torch.Tensor: ...


class RemoteRollouts:
    """The learner role's stand-in for a collector when actors collect (learner-actor): the
    rollouts its ``slots`` actors sent, side by side in one [T, slots x N] buffer, their last
    observations and their merged episode window. ``learn_step`` reads it as a collector."""

    def __init__(
        self, env: VecEnv, policy: ActorCritic, num_steps: int, slots: int, device: torch.device
    ):
        self.env, self.policy, self.num_steps, self.device = env, policy, num_steps, device
        self.slots = 0
        self.resize(slots)
        self.window = torch.full((WINDOW, 3), -1.0, device=device)
        self.ret = torch.zeros(3, dtype=torch.float64)
        """The actors' discounted-return moments, summed (reward scaling)."""
        self.last_rollout_time = 0.0

    def resize(self, slots: int) -> None:
        """Room for ``slots`` actors' rollouts (fewer after an actor was dropped)."""
        if slots == self.slots:
            return
        env, N = self.env, self.env.num_envs * slots
        self.buffer = rollout_buffer(env, self.policy, self.num_steps, N, self.device)
        self.obs = torch.zeros(N, env.obs_dim, dtype=self.policy.obs_dtype, device=self.device)
        self.memory = self.policy.initial_memory(N)
        self.slots = slots

    @property
    def collected(self) -> RolloutBuffer:
        return self.buffer

    def obs_moments(self) -> torch.Tensor:
        return obs_moments(self.buffer)

    def return_moments(self) -> torch.Tensor:
        return self.ret

    def episode_window(self, iteration: int) -> torch.Tensor:
        return self.window


def append_window(
    window: torch.Tensor,
    returns: torch.Tensor,
    lengths: torch.Tensor,
    ended: torch.Tensor,
    iteration: int,
    num_steps: int | None = None,
) -> torch.Tensor:
    """``window`` [WINDOW, 3] with the episodes that ended in a rollout added (``ended`` [t, N];
    ``returns``, ``lengths`` [t, N]: the running figures at each step), keyed by completion
    step (``num_steps`` per iteration; default t) so that windows of several ranks merge in
    order."""
    if not ended.any():
        return window
    t = ended.shape[0]
    T = t if num_steps is None else num_steps
    key = iteration * T + torch.arange(t, device=ended.device, dtype=torch.float32)
    key = key.unsqueeze(1).expand_as(ended)
    new = torch.stack([returns[ended], lengths[ended], key[ended]], 1)
    return torch.cat([window, new])[-WINDOW:]


def rollout_buffer(
    env: VecEnv, policy: ActorCritic, num_steps: int, num_envs: int, device: torch.device
) -> RolloutBuffer:
    """A [num_steps, num_envs] buffer for ``env``'s observations and actions and ``policy``'s
    memory."""
    space = env.action_space
    memory = tuple(policy.initial_memory(1).shape[1:])
    return RolloutBuffer(
        num_steps,
        num_envs,
        env.obs_dim,
        space.shape,  # () discrete, (K,) multi_discrete, (act_dim,) continuous
        space.categorical,
        device,
        policy.obs_dtype,
        memory,
    )


def obs_moments(buffer: RolloutBuffer) -> torch.Tensor:
    """A rollout's observation moments, flat float64 (summed over ranks they merge)."""
    obs = buffer.obs
    return Moments.of(obs.reshape(-1, obs.shape[-1])).to_flat()


def episode_summary(rollout_times: torch.Tensor, windows: torch.Tensor) -> dict[str, Any]:
    """Means over the newest WINDOW episodes of every collector, and the slowest collector's
    rollout time, from the gathered [ranks, 1] times and [ranks, WINDOW, 3] windows."""
    rollout_max = float(rollout_times.max())
    rows = windows.reshape(-1, 3)
    rows = rows[rows[:, 2] >= 0]
    if rows.shape[0] == 0:
        return {
            "episode_return_mean": None,
            "episode_length_mean": None,
            "time/rollout_max": rollout_max,
        }
    newest = rows[torch.argsort(rows[:, 2], descending=True, stable=True)[:WINDOW]]
    return {
        "episode_return_mean": float(newest[:, 0].mean()),
        "episode_length_mean": float(newest[:, 1].mean()),
        "time/rollout_max": rollout_max,
    }
