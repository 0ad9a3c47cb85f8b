"""``--agent.compile`` and ``--agent.precision bf16`` change how a minibatch's loss is computed,
not what it is: the compiled gradient equals the eager one to float32 rounding, the bfloat16
one to bfloat16's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from distrl.algorithms.ppo import PPO
from distrl.config import AgentConfig, PolicyConfig
from distrl.envs.core import ActionSpace
from distrl.policy.actor_critic import ActorCritic
from distrl.storage.rollout import RolloutBuffer

T, N, SHAPE = 4, 8, (2, 10, 10)
DIM = 200


def gradient(**agent) -> torch.Tensor:
    torch.manual_seed(0)
    policy = ActorCritic(
        DIM, ActionSpace("discrete", n=3), PolicyConfig(network="minatar-cnn"), SHAPE, torch.uint8
    )
    g = torch.Generator().manual_seed(1)
    buf = RolloutBuffer(T, N, DIM, (), True, torch.device("cpu"), torch.uint8)
    buf.obs.copy_(torch.randint(0, 2, (T, N, DIM), generator=g))
    buf.actions.copy_(torch.randint(0, 3, (T, N), generator=g))
    buf.advantages.copy_(torch.randn(T, N, generator=g))
    buf.returns.copy_(torch.randn(T, N, generator=g))
    with torch.no_grad():
        logp, _, values = policy.evaluate(buf.obs.view(T * N, DIM), buf.actions.view(-1))
    buf.logprobs.copy_(logp.view(T, N) - 0.1)
    buf.values.copy_(values.view(T, N))
    ppo = PPO(policy, dataclasses.replace(AgentConfig(num_steps=T), **agent))
    return ppo.gradient(buf.flat()).clone()


def test_bf16_autocast_gives_the_float32_gradient_to_bfloat16_precision():
    full, half = gradient(), gradient(precision="bf16")
    assert half.dtype == torch.float32
    cos = torch.nn.functional.cosine_similarity(full, half, dim=0)
    assert cos > 0.99, float(cos)


@pytest.mark.long  # inductor compiles for ~40 s on this CPU
@pytest.mark.timeout(300)
def test_the_compiled_update_computes_the_eager_gradient():
    torch.testing.assert_close(gradient(compile=True), gradient(), rtol=1e-4, atol=1e-6)
