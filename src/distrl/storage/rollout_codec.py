"""One actor's rollout as one flat float32 payload, and back (learner-actor's rollout message).

Beside the buffer it reads and writes (``storage/rollout.py``): the layout is the buffer's
fields, so a field added there is one line here. Pure tensor code: the transport that carries
the payload is ``distributed/``'s.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from distrl.storage.rollout import WINDOW
from distrl.storage.words import pack64, pack_bytes, unpack64, unpack_bytes


class RolloutCodec:
    """One actor's rollout <-> one flat float32 payload (fixed layout for a T x N buffer).

    Every field travels as float32 values, but uint8 observations (images) travel as their
    bytes packed four to a word, so a rollout of frames costs what its pixels weigh."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_dim: int,
        act_numel: int,
        num_actions: int | tuple[int, ...] = 0,
        obs_dtype: torch.dtype = torch.float32,
        memory_numel: int = 0,
    ):
        """Payload, in order: the buffer's tensors, a recurrent policy's memory (at the
        rollout's start, and for the last observations) and episode starts, the last
        observations, the return moments (``Moments.to_flat``, float64 as 6 float32 words:
        zeros without reward scaling), the episode window. ``num_actions``: a discrete action
        space's size, or each component's (``nvec``) for multi-discrete actions of
        ``act_numel`` components (0 or (): continuous). ``memory_numel``: one env's memory
        (0: none)."""
        T, N = num_steps, num_envs
        self.T, self.N, self.obs_dim, self.act_numel = T, N, obs_dim, act_numel
        sizes = (num_actions,) * act_numel if isinstance(num_actions, int) else num_actions
        self.num_actions = tuple(sizes) if any(sizes) else ()
        self.packed = obs_dtype == torch.uint8
        # name -> (elements, words on the wire)
        self.fields: dict[str, tuple[int, int]] = {}
        for name, n in (("obs", T * N * obs_dim), ("last_obs", N * obs_dim)):
            self.fields[name] = (n, (n + 3) // 4 if self.packed else n)
        self.fields["actions"] = (T * N * act_numel,) * 2
        for name in ("logprobs", "values", "rewards", "terminated", "truncated", "final_values"):
            self.fields[name] = (T * N,) * 2
        if memory_numel:
            self.fields["memory"] = self.fields["last_memory"] = (N * memory_numel,) * 2
            self.fields["starts"] = (T * N,) * 2
        self.fields["ret"] = (3, 6)
        self.fields["window"] = (WINDOW * 3,) * 2
        self.numel = sum(words for _, words in self.fields.values())

    @classmethod
    def for_policy(cls, policy: Any, num_steps: int, num_envs: int) -> RolloutCodec:
        """The codec of ``policy``'s (an ``ActorCritic``) rollouts of num_steps x num_envs."""
        space = policy.action_space
        act = math.prod(space.shape)  # 1 discrete, K multi-discrete, act_dim continuous
        n = space.sizes if space.categorical else 0
        memory = policy.initial_memory(1).numel()
        return cls(num_steps, num_envs, policy.obs_dim, act, n, policy.obs_dtype, memory)

    def encode_from(self, collector: Any) -> torch.Tensor:
        """An actor's rollout message: its ``Collector``'s rollout and, with reward scaling,
        its return moments."""
        ret = collector.return_moments() if collector.scales_rewards else torch.zeros(3)
        return self.encode(collector, ret)

    def encode(self, source: Any, ret: torch.Tensor) -> torch.Tensor:
        """``source``: the actor's ``Collector`` (its buffer, last observations, memory and
        episode window)."""
        buf, flat = source.buffer, []
        for name in self.fields:
            if name == "ret":
                flat.append(pack64(ret.cpu()))
                continue
            t = {"last_obs": source.obs, "last_memory": source.memory, "window": source.window}
            part = t[name] if name in t else getattr(buf, name)
            if self.packed and name in ("obs", "last_obs"):
                flat.append(pack_bytes(part.cpu()))
            else:
                flat.append(part.detach().reshape(-1).float().cpu())
        payload = torch.cat(flat)
        if payload.numel() != self.numel:  # the learner would drop this actor for it
            raise ValueError(
                f"rollout of {payload.numel()} words, the codec's layout has {self.numel}: the "
                f"buffer does not match the codec's shapes"
            )
        return payload

    def offset(self, name: str) -> int:
        """Where field ``name`` starts in the payload (in words)."""
        names = list(self.fields)
        return sum(self.fields[k][1] for k in names[: names.index(name)])

    def problem(self, payload: torch.Tensor) -> str | None:
        """Why a received rollout cannot be trained on (None if it can): a discrete action
        (or a multi-discrete action's component) that is not an index of its choices would
        index out of the policy's logits."""
        if not self.num_actions:
            return None
        start = self.offset("actions")
        K = len(self.num_actions)
        actions = payload[start : start + self.fields["actions"][1]].view(-1, K)
        sizes = torch.tensor(self.num_actions, dtype=actions.dtype)
        bad = (actions < 0) | (actions >= sizes) | (actions != actions.round())
        if bool(bad.any()):
            row, k = (int(i) for i in bad.nonzero()[0])
            which = f"component {k} of " if K > 1 else ""
            return f"{which}an action {float(actions[row, k])} outside 0..{self.num_actions[k] - 1}"
        return None

    def decode_into(
        self, payload: torch.Tensor, rollouts: Any, slot: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the rollout into columns [slot*N, (slot+1)*N) of ``rollouts`` (the learner's
        ``RemoteRollouts``: its buffer, last observations and memory); returns the actor's
        episode window [WINDOW, 3] and return moments (float64 [3])."""
        cols = slice(slot * self.N, (slot + 1) * self.N)
        buf, off = rollouts.buffer, 0
        ret = window = torch.zeros(0)
        for name, (n, words) in self.fields.items():
            piece = payload[off : off + words]
            off += words
            if name == "window":
                window = piece.view(WINDOW, 3).clone()
                continue
            if name == "ret":
                ret = unpack64(piece)
                continue
            if self.packed and name in ("obs", "last_obs"):
                piece = unpack_bytes(piece, n)
            if name in ("last_obs", "last_memory"):
                dst = (rollouts.obs if name == "last_obs" else rollouts.memory)[cols]
            elif name == "memory":
                dst = buf.memory[cols]
            else:
                dst = getattr(buf, name)[:, cols]
            dst.copy_(piece.view(dst.shape).to(dst.dtype).to(dst.device))
        return window, ret


def merge_windows(windows: list[torch.Tensor]) -> torch.Tensor:
    """The newest WINDOW episodes of several windows (rows (return, length, key); key -1 is an
    empty slot), as one window."""
    rows = torch.cat(windows)
    rows = rows[rows[:, 2] >= 0]
    rows = rows[torch.argsort(rows[:, 2], stable=True)][-WINDOW:]
    pad = torch.full((WINDOW - rows.shape[0], 3), -1.0)
    return torch.cat([pad, rows])
