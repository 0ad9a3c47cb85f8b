"""A replay buffer of transitions on the rank's device: a ring of ``capacity`` rows, the
observations kept in the env's dtype (uint8 images stay uint8), sampled uniformly with the
rank's own generator so that a resumed run draws the same minibatches.

Each row is (obs, action, reward, next_obs, terminated). ``next_obs`` is stored, not looked up
as the next row's ``obs``, because the observation after a time limit is the env's final
observation (``info["final_obs"]``), not the reset that follows it; the bootstrap on truncation
then needs no special case (Stable-Baselines3's default layout, twice the observation memory of
its ``optimize_memory_usage``, which cannot bootstrap at time limits).

With ``--offpolicy.n-step`` above 1 the rows are n-step transitions (``storage/nstep.py``) and
each holds its own ``discount`` (gamma^m, m the rewards summed). ``PrioritizedReplayBuffer``
samples in proportion to priorities instead of uniformly (Schaul et al. 2016).

TorchRL's ``ReplayBuffer`` with ``LazyTensorStorage`` does the same and more (prioritized and
remote storages); distrl keeps this ring because its rows must live in the training state as
plain tensors (checkpoints are ``torch.load(weights_only=True)``, which refuses TorchRL's pickled
storage objects) and sampling must draw from one seeded generator per rank.
"""

from __future__ import annotations

from typing import Any

import torch

from distrl.storage.sum_tree import SumTree

FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")
"""The fields of every row; n-step rows add ``discount``."""


class ReplayBuffer:
    prioritized = False
    """Samples by priority (``PrioritizedReplayBuffer``), not uniformly."""

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        obs_dtype: torch.dtype,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device,
        seed: int,
        discount: bool = False,
    ):
        """``discount``: the rows are n-step transitions, each with its own discount."""
        self.capacity, self.device = capacity, device
        self.fields = (*FIELDS, "discount") if discount else FIELDS
        z: dict[str, Any] = dict(device=device)
        self.obs = torch.zeros(capacity, obs_dim, dtype=obs_dtype, **z)
        self.next_obs = torch.zeros(capacity, obs_dim, dtype=obs_dtype, **z)
        self.actions = torch.zeros(capacity, *action_shape, dtype=action_dtype, **z)
        self.rewards = torch.zeros(capacity, **z)
        self.terminated = torch.zeros(capacity, dtype=torch.bool, **z)
        if discount:
            self.discount = torch.zeros(capacity, **z)
        self.pos = 0  # the next row written
        self.size = 0  # rows holding a transition
        self.generator = torch.Generator(device=device).manual_seed(seed)

    @staticmethod
    def bytes_per_transition(
        obs_dim: int,
        obs_dtype: torch.dtype,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        discount: bool = False,
        prioritized: bool = False,
    ) -> int:
        """A row's bytes; ``prioritized``: with two float64 nodes of the sum tree (up to twice
        that where the capacity is just above a power of two)."""
        obs = obs_dim * torch.empty((), dtype=obs_dtype).element_size()
        act = max(1, int(torch.tensor(action_shape).prod())) if action_shape else 1
        act *= torch.empty((), dtype=action_dtype).element_size()
        extra = (4 if discount else 0) + (16 if prioritized else 0)
        return 2 * obs + act + 4 + 1 + extra  # reward float32, terminated bool

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f).nbytes for f in self.fields)

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        discount: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Append one step of N envs (rows [N, ...]), overwriting the oldest when full; returns
        the rows written. ``discount``: the n-step rows' discounts (given exactly when the
        buffer holds them)."""
        n = obs.shape[0]
        if n > self.capacity:
            raise ValueError(
                f"one step of {n} envs does not fit a replay of {self.capacity} transitions; "
                f"raise --offpolicy.buffer-size"
            )
        if (discount is None) != ("discount" not in self.fields):
            raise ValueError("a replay of n-step rows takes their discount, and only it does")
        idx = (self.pos + torch.arange(n, device=self.device)) % self.capacity
        values: tuple[torch.Tensor, ...] = (obs, actions, rewards, next_obs, terminated)
        values += () if discount is None else (discount,)
        for name, x in zip(self.fields, values, strict=True):
            getattr(self, name)[idx] = x
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        return idx

    def sample(self, batch: int) -> dict[str, torch.Tensor]:
        """``batch`` transitions drawn uniformly (with replacement) from the filled rows."""
        if self.size == 0:
            raise RuntimeError("sampling an empty replay buffer")
        idx = torch.randint(self.size, (batch,), generator=self.generator, device=self.device)
        return self.rows(idx)

    def rows(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """The rows ``idx`` [B] of every field."""
        return {name: getattr(self, name)[idx] for name in self.fields}

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
            filled = {name: getattr(self, name)[: self.size] for name in self.fields}
            state |= {name: rows_.to("cpu", copy=True) for name, rows_ in filled.items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a ``state_dict``: the same capacity, shapes and dtypes, every row present."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"the checkpoint's replay holds {state['capacity']} transitions, this run's "
                f"--offpolicy.buffer-size {self.capacity}; resume with the saved run's"
            )
        if ("max_priority" in state) != self.prioritized:
            kind = "prioritized" if "max_priority" in state else "uniform"
            raise ValueError(
                f"the checkpoint's replay is {kind}; resume with the saved run's "
                f"--offpolicy.prioritized"
            )
        size = int(state["size"])
        if size and ("discount" in state) != ("discount" in self.fields):
            raise ValueError(
                "the checkpoint's replay rows are "
                + ("n-step" if "discount" in state else "one-step")
                + " transitions and this run's --offpolicy.n-step makes the other kind; resume "
                "with the saved run's --offpolicy.n-step"
            )
        for name in self.fields if size else ():
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


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016, as Ape-X uses it): row i is drawn
    with probability P(i) = p_i^alpha / sum_k p_k^alpha, p_i = |TD error| + eps from its last
    update (new rows: the largest p so far, so that each is drawn soon), and weighted by
    w_i = (size P(i))^-beta / max_batch w, the importance-sampling correction normalised by the
    batch's largest weight, so that it only scales updates down.

    The p^alpha are the leaves of a ``SumTree`` (``storage/sum_tree.py`` says why a tree). A
    minibatch is stratified as in the paper: [0, total) cut into ``batch`` equal ranges, one
    uniform draw in each, from the buffer's own generator (a resume draws the same rows).
    """

    prioritized = True

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        obs_dtype: torch.dtype,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device,
        seed: int,
        discount: bool = False,
        *,
        alpha: float,
        eps: float,
    ):
        super().__init__(
            capacity, obs_dim, obs_dtype, action_shape, action_dtype, device, seed, discount
        )
        self.alpha, self.eps = alpha, eps
        self.max_priority = torch.ones((), device=device)  # 0-dim: updated without a host sync
        self.tree = SumTree(capacity, device)

    @property
    def nbytes(self) -> int:
        return super().nbytes + self.tree.tree.nbytes

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        discount: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Append rows as ``ReplayBuffer.add``, each at the largest priority so far."""
        idx = super().add(obs, actions, rewards, next_obs, terminated, discount)
        self.tree.set(idx, self._leaf(self.max_priority).expand(idx.shape[0]))
        return idx

    def _leaf(self, p: torch.Tensor) -> torch.Tensor:
        return p.double().pow(self.alpha)

    def sample(self, batch: int, beta: float = 1.0) -> dict[str, torch.Tensor]:
        """``batch`` rows drawn in proportion to p^alpha (stratified), with their ``index``
        (for ``update_priorities``) and importance-sampling ``weights`` of exponent ``beta``."""
        if self.size == 0:
            raise RuntimeError("sampling an empty replay buffer")
        total = self.tree.total
        u = torch.rand(batch, generator=self.generator, device=self.device, dtype=torch.float64)
        strata = torch.arange(batch, device=self.device, dtype=torch.float64)
        mass = (strata + u) * (total / batch)
        # rounding can walk past the last filled row (a zero leaf): take the last filled one
        idx = self.tree.find(mass).clamp_max(self.size - 1)
        prob = self.tree.values(idx) / total
        weights = (self.size * prob).pow(-beta)
        weights = (weights / weights.max()).float()
        return self.rows(idx) | {"index": idx, "weights": weights}

    def update_priorities(self, index: torch.Tensor, td_abs: torch.Tensor) -> None:
        """Rows ``index`` [B] get p = ``td_abs`` + eps (a row drawn twice in one batch: the
        larger)."""
        p = td_abs.detach().float() + self.eps
        self.max_priority = torch.maximum(self.max_priority, p.max())
        self.tree.set(index, self._leaf(p))

    # ---- checkpoints -----------------------------------------------------------------------
    def state_dict(self, rows: bool = True) -> dict[str, Any]:
        """``ReplayBuffer.state_dict`` with the filled rows' p^alpha (the tree's leaves, as
        they are: recomputing them could round otherwise), alpha and the largest p so far."""
        state = super().state_dict(rows)
        state |= {"priority_alpha": self.alpha, "max_priority": self.max_priority.cpu()}
        if rows:
            leaves = self.tree.values(torch.arange(self.size, device=self.device))
            state["priorities"] = leaves.cpu()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "priority_alpha" in state and float(state["priority_alpha"]) != self.alpha:
            raise ValueError(
                f"the checkpoint's replay priorities are p^{state['priority_alpha']}, this run's "
                f"--offpolicy.priority-alpha {self.alpha}; resume with the saved run's"
            )
        super().load_state_dict(state)
        saved = state.get("priorities") if self.size else torch.zeros(0, dtype=torch.float64)
        if not isinstance(saved, torch.Tensor) or saved.shape != (self.size,):
            got = tuple(saved.shape) if isinstance(saved, torch.Tensor) else type(saved)
            raise ValueError(
                f"the checkpoint's replay priorities are {got}, expected ({self.size},): the "
                f"file is truncated"
            )
        self.tree.load(saved.to(self.device))
        self.max_priority = state["max_priority"].to(self.device)
