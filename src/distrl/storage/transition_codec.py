"""The rows an actor's iteration adds to a replay, as one flat float32 payload and back: the
message of an Ape-X actor (``--dist.strategy learner-actor`` with dqn, sac or td3), and of a
PQN actor, whose rows (one step's N after another, with their ``truncated`` flags) are its
whole rollout.

Beside the replay it fills (``storage/replay.py``): the fields are ``ReplayBuffer.add``'s. An
iteration yields up to ``rows`` of them (T x N; with n-step returns fewer while the windows
first fill), so the payload carries the count first and the fields padded to ``rows``. Pure
tensor code.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from distrl.storage.rollout import WINDOW
from distrl.storage.words import pack_bytes, unpack_bytes


class TransitionCodec:
    """Up to ``rows`` replay rows <-> one flat float32 payload of fixed size. uint8
    observations (images) travel as their bytes, four to a word."""

    def __init__(
        self,
        rows: int,
        obs_dim: int,
        obs_dtype: torch.dtype,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        num_actions: int = 0,
        discount: bool = False,
        num_steps: int = 1,
        num_envs: int = 1,
        truncation: bool = False,
    ):
        """``num_actions``: a discrete action space's size (0: continuous); ``discount``: the
        rows are n-step rows, each with its own discount; ``num_steps`` x ``num_envs``: the
        transitions of one iteration (what a dropped message counts); ``truncation``: the rows
        carry their ``truncated`` flags (PQN's Q(lambda) tells a time limit from a step)."""
        self.rows, self.obs_dim, self.obs_dtype = rows, obs_dim, obs_dtype
        self.action_shape, self.action_dtype = action_shape, action_dtype
        self.num_actions, self.T, self.N = num_actions, num_steps, num_envs
        self.packed = obs_dtype == torch.uint8
        obs = rows * obs_dim
        obs_words = (obs + 3) // 4 if self.packed else obs
        act = rows * max(1, math.prod(action_shape))
        self.fields: dict[str, tuple[int, int]] = {"count": (1, 1)}
        self.fields |= {"obs": (obs, obs_words), "next_obs": (obs, obs_words)}
        self.fields |= {"actions": (act, act), "rewards": (rows, rows)}
        self.fields["terminated"] = (rows, rows)
        if truncation:
            self.fields["truncated"] = (rows, rows)
        if discount:
            self.fields["discount"] = (rows, rows)
        self.fields["window"] = (WINDOW * 3,) * 2
        self.numel = sum(words for _, words in self.fields.values())

    @classmethod
    def for_policy(
        cls, policy: Any, num_steps: int, num_envs: int, n_step: int = 1, truncation: bool = False
    ) -> TransitionCodec:
        """The codec of one iteration of ``policy``'s (an ``ActorCritic``) num_envs envs: T x N
        rows at most (an n-step window gives one row per env step, n - 1 steps late:
        ``storage/nstep.py``)."""
        space = policy.action_space
        if space.categorical:
            shape, dtype, n = tuple(space.shape), torch.long, int(space.sizes[0])
        else:
            shape, dtype, n = (len(space.low),), torch.float32, 0
        rows = num_steps * num_envs
        return cls(
            rows, policy.obs_dim, policy.obs_dtype, shape, dtype, n, n_step > 1, num_steps,
            num_envs, truncation,
        )  # fmt: skip

    def decode_into(self, payload: torch.Tensor, target: Any, slot: int) -> tuple[Any, Any]:
        """Add the rows to ``target`` (the learner's ``RemoteTransitions``); returns the
        actor's episode window and (no reward scaling) zero return moments. ``slot``: the
        actor's place among the learner's (the rows go in that order)."""
        rows, window = self.decode(payload, target.device)
        target.add_rows(rows)
        return window, torch.zeros(3, dtype=torch.float64)

    def offset(self, name: str) -> int:
        names = list(self.fields)
        return sum(self.fields[k][1] for k in names[: names.index(name)])

    def encode(self, batch: dict[str, torch.Tensor], window: torch.Tensor) -> torch.Tensor:
        """``batch``: the rows by field (as ``ReplayBuffer.add`` takes them), at most
        ``rows``; ``window``: the actor's episode window [WINDOW, 3]."""
        n = int(batch["rewards"].shape[0]) if batch else 0
        if n > self.rows:
            raise ValueError(f"{n} rows do not fit a message of {self.rows}")
        flat = []
        for name, (numel, _) in self.fields.items():
            if name == "count":
                flat.append(torch.tensor([float(n)]))
                continue
            if name == "window":
                flat.append(window.detach().reshape(-1).float().cpu())
                continue
            part = torch.zeros(numel, dtype=self.obs_dtype if "obs" in name else torch.float32)
            if n:
                values = batch[name].detach().reshape(-1).cpu()
                part[: values.numel()] = values.to(part.dtype)
            flat.append(pack_bytes(part) if self.packed and "obs" in name else part.float())
        return torch.cat(flat)

    def encode_from(self, source: Any) -> torch.Tensor:
        """An Ape-X actor's message: what its runner added this iteration
        (``take_transitions``: the rows and its episode window)."""
        return self.encode(*source.take_transitions())

    def count(self, payload: torch.Tensor) -> int:
        return int(payload[0])

    def problem(self, payload: torch.Tensor) -> str | None:
        """Why a received message cannot be stored (None if it can): a row count outside
        0..rows, a discrete action that is not an index of its choices, a terminated flag or a
        discount outside [0, 1]."""
        count = float(payload[0])
        if not (0 <= count <= self.rows and count == round(count)):
            return f"a transition count of {count} (0..{self.rows} fit)"
        n = int(count)
        flags = [k for k in ("terminated", "truncated") if k in self.fields]
        got = {k: self._field(payload, k)[:n] for k in ("actions", "rewards", *flags)}
        if self.num_actions:
            a = got["actions"]
            bad = (a < 0) | (a >= self.num_actions) | (a != a.round())
            if bool(bad.any()):
                return f"an action {float(a[bad][0])} outside 0..{self.num_actions - 1}"
        for flag in flags:
            if not bool(((got[flag] == 0) | (got[flag] == 1)).all()):
                return f"a {flag} flag that is neither 0 nor 1"
        if "discount" in self.fields:
            d = self._field(payload, "discount")[:n]
            if not bool(((d >= 0) & (d <= 1)).all()):
                return "a discount outside [0, 1]"
        return None

    def _field(self, payload: torch.Tensor, name: str) -> torch.Tensor:
        start = self.offset(name)
        return payload[start : start + self.fields[name][1]]

    def decode(self, payload: torch.Tensor, device: Any) -> tuple[dict[str, torch.Tensor], Any]:
        """(the rows by field, on ``device``, in the replay's dtypes; the episode window)."""
        n = self.count(payload)
        act = max(1, math.prod(self.action_shape))
        rows: dict[str, torch.Tensor] = {}
        for name, (numel, _) in self.fields.items():
            if name in ("count", "window"):
                continue
            piece = self._field(payload, name)
            if self.packed and "obs" in name:
                piece = unpack_bytes(piece, numel)
            if "obs" in name:
                t = piece[: n * self.obs_dim].view(n, self.obs_dim).to(self.obs_dtype)
            elif name == "actions":
                t = piece[: n * act].view(n, *self.action_shape).to(self.action_dtype)
            elif name in ("terminated", "truncated"):
                t = piece[:n].bool()
            else:
                t = piece[:n].clone()
            rows[name] = t.to(device)
        window = self._field(payload, "window").view(WINDOW, 3).clone()
        return rows, window
