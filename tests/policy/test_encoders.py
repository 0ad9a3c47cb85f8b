"""Image encoders and the recurrent core: shapes, uint8 handling, and that the update replays
exactly what the rollout computed."""

from __future__ import annotations

import pytest
import torch

from distrl.config import PolicyConfig
from distrl.envs.core import ActionSpace
from distrl.policy import ActorCritic
from distrl.storage.rollout import minibatch_indices, sequence_minibatches

SPACE = ActionSpace("discrete", n=3)


@pytest.mark.parametrize(
    ("network", "shape"), [("minatar-cnn", (4, 10, 10)), ("nature-cnn", (4, 84, 84))]
)
def test_image_policy_takes_uint8_rows_and_skips_the_normalizer(network, shape):
    dim = int(torch.tensor(shape).prod())
    policy = ActorCritic(dim, SPACE, PolicyConfig(network=network), shape, torch.uint8)
    assert not policy.normalizer.enabled and policy.normalizer.mean.numel() == 0
    obs = torch.randint(0, 256, (5, dim), dtype=torch.uint8)
    actions, logp, value = policy.act(obs)
    assert actions.shape == (5,) and logp.shape == (5,) and value.shape == (5,)
    logp2, _, value2 = policy.evaluate(obs, actions)
    torch.testing.assert_close(logp2, logp)
    torch.testing.assert_close(value2, value)


def test_layer_norm_puts_a_norm_before_each_relu_of_the_image_encoders():
    """PQN's MinAtar network: LayerNorm over the channels after the convolution and over the
    128 units, before their ReLUs; without --policy.layer-norm the encoder has none."""
    dim = 400
    plain = ActorCritic(dim, SPACE, PolicyConfig(network="minatar-cnn"), (4, 10, 10), torch.uint8)
    cfg = PolicyConfig(network="minatar-cnn", layer_norm=True)
    policy = ActorCritic(dim, SPACE, cfg, (4, 10, 10), torch.uint8)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in plain.modules())
    layers = list(policy.encoder.net)
    kinds = [type(m).__name__ for m in layers]
    assert kinds == [
        *("Conv2d", "ChannelLayerNorm", "ReLU", "Flatten", "Linear", "LayerNorm", "ReLU"),
    ]
    conv_out = layers[1](layers[0](torch.randn(3, 4, 10, 10)))  # each position normalized
    torch.testing.assert_close(conv_out.mean(1), torch.zeros(3, 8, 8), atol=1e-5, rtol=0)
    actions, _, _ = policy.act(torch.randint(0, 2, (5, dim), dtype=torch.uint8))
    assert actions.shape == (5,)


def test_a_cnn_on_vectors_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match="image observations of shape .C, H, W.*mlp"):
        ActorCritic(4, SPACE, PolicyConfig(network="minatar-cnn"))
    with pytest.raises(ValueError, match="too small.*minatar-cnn"):
        ActorCritic(400, SPACE, PolicyConfig(network="nature-cnn"), (4, 10, 10), torch.uint8)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("network", ["mlp", "minatar-cnn"])
def test_the_update_replays_the_rollout_step_for_step(kind, network):
    """What ``evaluate`` computes over whole sequences from their first memory, with the
    memory zeroed where episodes start, is what ``act`` computed one step at a time."""
    torch.manual_seed(0)
    shape = (2, 10, 10) if network == "minatar-cnn" else (6,)
    dim, dtype = int(torch.tensor(shape).prod()), torch.uint8 if len(shape) == 3 else torch.float32
    cfg = PolicyConfig(network=network, recurrent=kind, recurrent_hidden=16)
    policy = ActorCritic(dim, SPACE, cfg, shape, dtype)
    T, N = 7, 4
    if dtype == torch.uint8:
        obs = torch.randint(0, 2, (T, N, dim), dtype=dtype)
    else:
        obs = torch.randn(T, N, dim)
    starts = torch.rand(T, N) < 0.25
    memory = torch.randn(N, *policy.initial_memory(1).shape[1:])
    first = memory.clone()
    actions, logps, values = [], [], []
    with torch.no_grad():
        for t in range(T):
            memory.masked_fill_(starts[t].view(-1, 1, 1), 0.0)
            a, lp, v = policy.act(obs[t], memory=memory)
            actions.append(a)
            logps.append(lp)
            values.append(v)
        logp, _, value = policy.evaluate(
            obs.reshape(T * N, dim), torch.cat(actions), first, starts.reshape(-1)
        )
    torch.testing.assert_close(logp, torch.cat(logps))
    torch.testing.assert_close(value, torch.cat(values))


def test_memory_carries_information_across_steps():
    policy = ActorCritic(3, SPACE, PolicyConfig(recurrent="lstm", recurrent_hidden=8))
    memory = policy.initial_memory(2)
    with torch.no_grad():
        policy.act(torch.tensor([[1.0, 0, 0], [-1.0, 0, 0]]), memory=memory)
        v = policy.value(torch.zeros(2, 3), memory)
    assert not torch.equal(v[0], v[1])  # same observation now, different past


def test_sequence_minibatches_hold_whole_sequences_and_split_across_ranks():
    T, N, M, W = 5, 8, 2, 2
    one = sequence_minibatches(T, N, M, torch.Generator().manual_seed(3), blocks=W)
    seen = torch.cat(one).sort().values
    assert torch.equal(seen, torch.arange(T * N))  # every row once per epoch
    for idx in one:
        grid = idx.view(T, -1)
        envs = grid[0]
        assert torch.equal(grid, torch.arange(T).unsqueeze(1) * N + envs)  # time-major
    # W ranks of N/W envs, each with the same generator, form the same minibatches (as sets)
    nb = N // W
    per_rank = sequence_minibatches(T, nb, M, torch.Generator().manual_seed(3))
    for j, idx in enumerate(one):
        envs = set(idx.view(T, -1)[0].tolist())
        rank_envs = {int(e) + r * nb for r in range(W) for e in per_rank[j].view(T, -1)[0]}
        assert envs == rank_envs
    with pytest.raises(ValueError, match="do not split into --agent.num-minibatches 3"):
        sequence_minibatches(T, 4, 3, torch.Generator())
    assert len(minibatch_indices(T, N, M, torch.Generator())) == M


def test_predict_takes_numpy_or_torch_one_or_a_batch_as_sb3_does():
    import numpy as np

    torch.manual_seed(0)
    policy = ActorCritic(3, SPACE, PolicyConfig())
    batch = torch.randn(5, 3)
    action, state = policy.predict(batch.numpy())
    assert isinstance(action, np.ndarray) and action.shape == (5,) and state is None
    assert np.array_equal(action, policy.act_deterministic(batch).numpy())
    one, _ = policy.predict(batch[0].numpy())
    assert isinstance(one, np.ndarray) and one.shape == () and one == action[0]
    row, _ = policy.predict(batch[:1].numpy())  # a batch of one stays a batch
    assert row.shape == (1,)
    t, _ = policy.predict(batch)
    assert isinstance(t, torch.Tensor) and torch.equal(t, torch.as_tensor(action))
    sampled, _ = policy.predict(batch, deterministic=False)
    assert sampled.shape == (5,) and ((sampled >= 0) & (sampled < 3)).all()


def test_predict_carries_a_recurrent_policy_s_memory_between_calls():
    torch.manual_seed(0)
    policy = ActorCritic(3, SPACE, PolicyConfig(recurrent="lstm", recurrent_hidden=8))
    obs = torch.randn(4, 3)
    memory = policy.initial_memory(4)
    ours = [policy.act_deterministic(obs * k, memory) for k in (1.0, -1.0, 2.0)]
    state, theirs = None, []
    for k in (1.0, -1.0, 2.0):
        action, state = policy.predict((obs * k).numpy(), state)
        theirs.append(torch.as_tensor(action))
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert state.shape == (4, 2, 8)
