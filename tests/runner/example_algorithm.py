"""An algorithm added the way the architecture says to add one: one file, one registry line.

PPO with clipped advantages: after GAE, every advantage is clipped to [-LIMIT, LIMIT] (in the
returns' units, before the global normalization), so that a few large TD errors do not decide
a whole update. The runner is ``OnPolicyRunner`` with that one change; what it needs from a
strategy and the options it reads are PPO's, so its registry row is PPO's with another runner,
another name and the tasks it claims. It trains here through ``distrl.train`` on real ranks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from distrl.runner.algorithms import ALGORITHMS
from distrl.runner.on_policy import OnPolicyRunner
from distrl.storage.rollout import RolloutBuffer

TASK = "cartpole-clipped-adv"
LIMIT = 1.0


class ClippedAdvantageRunner(OnPolicyRunner):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clipped = 0.0
        gae = self.learner.advantages

        def clipped(buf: RolloutBuffer, last_obs: torch.Tensor, memory: torch.Tensor) -> None:
            gae(buf, last_obs, memory)
            self.clipped = float((buf.advantages.abs() > LIMIT).float().mean())
            buf.advantages.clamp_(-LIMIT, LIMIT)

        self.learner.advantages = clipped  # type: ignore[method-assign]

    def learn_step(self) -> dict[str, Any]:
        return {**super().learn_step(), "adv/clipped": self.clipped}


def register() -> None:
    """The task (public ``register_task``) and the algorithm that trains it."""
    import distrl
    from distrl.envs.registry import get_task

    cartpole = get_task("cartpole")
    distrl.register_task(TASK, cartpole.make_env, default_config=cartpole.default_config())
    ALGORITHMS["ppo-clipped-adv"] = dataclasses.replace(  # the one registry line
        ALGORITHMS["ppo"], name="PPO, clipped advantages", runner=ClippedAdvantageRunner,
        claims=lambda task: task.name == TASK, tasks=TASK,
    )  # fmt: skip


def train_clipped(rank: int, world: int, run_dir: str) -> dict:
    """``distrl.train`` of the example's task on this rank (the harness set up torchrun's
    environment); returns rank 0's records and this rank's final parameters."""
    import distrl
    from distrl.telemetry import read_metrics

    register()
    cfg = distrl.make_config(
        TASK, env={"num_envs": 16}, agent={"num_steps": 8, "max_iterations": 3},
        run_dir=run_dir, device="cpu", threads=1, progress=False, tensorboard=False,
    )  # fmt: skip
    result = distrl.train(cfg)
    assert result.policy is not None
    params = torch.cat([p.detach().reshape(-1) for p in result.policy.parameters()])
    records = read_metrics(result.run_dir / "metrics.jsonl") if result.is_main else []
    return {"records": records, "params": params}
