"""A replay buffer of transitions on the rank's device: a ring of ``capacity`` rows, the
observations kept in the env's dtype (uint8 images stay uint8), sampled uniformly with the
rank's own generator so that a resumed run draws the same minibatches.

Each row is (obs, action, reward, next_obs, terminated). ``next_obs`` is stored, not looked up
as the next row's ``obs``, because the observation after a time limit is the env's final
observation (``info["final_obs"]``), not the reset that follows it; the bootstrap on truncation
then needs no special case (Stable-Baselines3's default layout, twice the observation memory of
its ``optimize_memory_usage``, which cannot bootstrap at time limits).

TorchRL's ``ReplayBuffer`` with ``LazyTensorStorage`` does the same and more (prioritized and
remote storages); distrl keeps this 100-line ring because its rows must live in the training
state as plain tensors (checkpoints are ``torch.load(weights_only=True)``, which refuses
TorchRL's pickled storage objects) and sampling must draw from one seeded generator per rank.
"""

from __future__ import annotations

from typing import Any

import torch

FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")


class ReplayBuffer:
    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        obs_dtype: torch.dtype,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device,
        seed: int,
    ):
        self.capacity, self.device = capacity, device
        z: dict[str, Any] = dict(device=device)
        self.obs = torch.zeros(capacity, obs_dim, dtype=obs_dtype, **z)
        self.next_obs = torch.zeros(capacity, obs_dim, dtype=obs_dtype, **z)
        self.actions = torch.zeros(capacity, *action_shape, dtype=action_dtype, **z)
        self.rewards = torch.zeros(capacity, **z)
        self.terminated = torch.zeros(capacity, dtype=torch.bool, **z)
        self.pos = 0  # the next row written
        self.size = 0  # rows holding a transition
        self.generator = torch.Generator(device=device).manual_seed(seed)

    @staticmethod
    def bytes_per_transition(
        obs_dim: int,
        obs_dtype: torch.dtype,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
    ) -> int:
        obs = obs_dim * torch.empty((), dtype=obs_dtype).element_size()
        act = max(1, int(torch.tensor(action_shape).prod())) if action_shape else 1
        act *= torch.empty((), dtype=action_dtype).element_size()
        return 2 * obs + act + 4 + 1  # reward float32, terminated bool

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f).nbytes for f in FIELDS)

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
    ) -> None:
        """Append one step of N envs (rows [N, ...]), overwriting the oldest when full."""
        n = obs.shape[0]
        if n > self.capacity:
            raise ValueError(
                f"one step of {n} envs does not fit a replay of {self.capacity} transitions; "
                f"raise --offpolicy.buffer-size"
            )
        idx = (self.pos + torch.arange(n, device=self.device)) % self.capacity
        for name, x in zip(FIELDS, (obs, actions, rewards, next_obs, terminated), strict=True):
            getattr(self, name)[idx] = x
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch: int) -> dict[str, torch.Tensor]:
        """``batch`` transitions drawn uniformly (with replacement) from the filled rows."""
        if self.size == 0:
            raise RuntimeError("sampling an empty replay buffer")
        idx = torch.randint(self.size, (batch,), generator=self.generator, device=self.device)
        return {name: getattr(self, name)[idx] for name in FIELDS}

    # ---- checkpoints -----------------------------------------------------------------------
    def state_dict(self, rows: bool = True) -> dict[str, Any]:
        """The filled rows (``rows``: else only the counters and the generator), on the CPU."""
        state: dict[str, Any] = {
            "capacity": self.capacity,
            "pos": self.pos,
            "size": self.size if rows else 0,
            "generator": self.generator.get_state(),
        }
        if rows:  # copies: torch.save of a view would write the whole ring's storage
            filled = {name: getattr(self, name)[: self.size] for name in FIELDS}
            state |= {name: rows_.to("cpu", copy=True) for name, rows_ in filled.items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a ``state_dict``: the same capacity, shapes and dtypes, every row present."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"the checkpoint's replay holds {state['capacity']} transitions, this run's "
                f"--offpolicy.buffer-size {self.capacity}; resume with the saved run's"
            )
        size = int(state["size"])
        for name in FIELDS if size else ():
            saved, mine = state.get(name), getattr(self, name)
            if not isinstance(saved, torch.Tensor) or saved.shape != (size, *mine.shape[1:]):
                got = tuple(saved.shape) if isinstance(saved, torch.Tensor) else type(saved)
                raise ValueError(
                    f"the checkpoint's replay field {name!r} is {got}, expected "
                    f"{(size, *mine.shape[1:])} ({mine.dtype}): the file is truncated or from "
                    f"another env"
                )
            mine[:size] = saved.to(self.device, mine.dtype)
        self.size = size
        self.pos = int(state["pos"]) if size else 0
        self.generator.set_state(state["generator"])
