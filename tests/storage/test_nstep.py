"""n-step transitions: a hand-computed window with a termination and a time limit inside it, the
one-step window that reproduces the one-step rows and arithmetic bit for bit, and a window
that continues the same after a round trip through its state."""

from __future__ import annotations

import torch

from distrl.algorithms.dqn import double_q_target
from distrl.policy.actor_critic import ActorCritic
from distrl.storage.nstep import NStepWindow
from distrl.storage.replay import ReplayBuffer

CPU = torch.device("cpu")


def window(n: int, num_envs: int, gamma: float, obs_dim: int = 1) -> NStepWindow:
    return NStepWindow(n, num_envs, obs_dim, torch.float32, (), torch.long, gamma, CPU)


# Env 0 over 8 steps, n = 3, gamma = 0.5: a termination at step 2 and a time limit at step 4.
# obs_t = 10 + t, the observation after step t = 20 + t (the final one at 2 and 4), action t.
R0 = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]
TERM0 = [False, False, True, False, False, False, False, False]
TRUNC0 = [False, False, False, False, True, False, False, False]
# the transition starting at each step t = 0..5: (R, next obs, terminated, discount)
EXPECTED0 = [
    (1 + 0.5 * 2 + 0.25 * 4, 22.0, True, 0.125),  # steps 0, 1, 2: terminated at 2
    (2 + 0.5 * 4, 22.0, True, 0.25),  # steps 1, 2
    (4.0, 22.0, True, 0.5),  # step 2 alone
    (8 + 0.5 * 16, 24.0, False, 0.25),  # steps 3, 4: the time limit bootstraps from obs 24
    (16.0, 24.0, False, 0.5),  # step 4 alone
    (32 + 0.5 * 64 + 0.25 * 128, 27.0, False, 0.125),  # steps 5, 6, 7
]


def test_n_step_rows_stop_at_a_termination_and_bootstrap_at_a_time_limit():
    w = window(3, 2, 0.5)
    got = []
    for t in range(8):
        rows = w.push(
            torch.tensor([[10.0 + t], [10.0 + t]]),
            torch.tensor([t, t]),
            torch.tensor([R0[t], 1.0]),  # env 1: reward 1 every step, no episode ends
            torch.tensor([[20.0 + t], [20.0 + t]]),
            torch.tensor([TERM0[t], False]),
            torch.tensor([TRUNC0[t], False]),
        )
        if t < 2:
            assert rows is None  # the window fills first
            continue
        assert rows is not None
        got.append(rows)
    for start, (rows, (ret, nxt, term, disc)) in enumerate(zip(got, EXPECTED0, strict=True)):
        assert rows["obs"].tolist() == [[10.0 + start]] * 2, start
        assert rows["actions"].tolist() == [start, start]
        assert rows["rewards"].tolist() == [ret, 1.75], start
        assert rows["next_obs"].tolist() == [[nxt], [22.0 + start]], start
        assert rows["terminated"].tolist() == [term, False], start
        assert rows["discount"].tolist() == [disc, 0.125], start


def test_a_one_step_window_gives_the_one_step_rows_and_targets_bit_for_bit():
    """n = 1 through the window: the same rows, and the same double-Q targets with each row's
    discount as with gamma (the runner keeps n = 1 off the window anyway)."""
    g = torch.Generator().manual_seed(0)
    w = window(1, 5, 0.99, obs_dim=4)
    obs, nxt = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    reward = torch.randn(5, generator=g)
    term = torch.tensor([True, False, False, True, False])
    trunc = torch.tensor([False, True, False, False, False])
    rows = w.push(obs, torch.arange(5), reward, nxt, term, trunc)
    assert rows is not None
    assert torch.equal(rows["obs"], obs) and torch.equal(rows["next_obs"], nxt)
    assert torch.equal(rows["rewards"], reward) and torch.equal(rows["terminated"], term)
    assert rows["discount"].tolist() == [torch.tensor(0.99).item()] * 5

    from distrl.config import PolicyConfig
    from distrl.envs.cartpole import CartPole

    torch.manual_seed(0)
    env = CartPole(5, CPU)
    online = ActorCritic.for_env(env, PolicyConfig(actor_hidden=(8,), critic_hidden=(8,)))
    target = ActorCritic.for_env(env, PolicyConfig(actor_hidden=(8,), critic_hidden=(8,)))
    one = double_q_target(online, target, reward, nxt, term, 0.99)
    each = double_q_target(online, target, rows["rewards"], nxt, term, rows["discount"])
    assert torch.equal(one, each)


def test_a_window_continues_the_same_after_its_state_round_trip():
    g = torch.Generator().manual_seed(1)
    steps = [
        (
            torch.randn(3, 2, generator=g),
            torch.randint(2, (3,), generator=g),
            torch.randn(3, generator=g),
            torch.randn(3, 2, generator=g),
            torch.rand(3, generator=g) < 0.2,
            torch.rand(3, generator=g) < 0.2,
        )
        for _ in range(9)
    ]
    a = window(4, 3, 0.9, obs_dim=2)
    for step in steps[:5]:
        a.push(*step)
    b = window(4, 3, 0.9, obs_dim=2)
    b.load_state_dict(a.state_dict())
    for step in steps[5:]:
        ra, rb = a.push(*step), b.push(*step)
        assert ra is not None and rb is not None
        for k in ra:
            assert torch.equal(ra[k], rb[k]), k


def test_n_step_rows_go_into_a_replay_with_their_discount():
    rb = ReplayBuffer(8, 1, torch.float32, (), torch.long, CPU, seed=0, discount=True)
    w = window(2, 2, 0.5)
    for t in range(3):
        rows = w.push(
            torch.full((2, 1), float(t)),
            torch.zeros(2, dtype=torch.long),
            torch.ones(2),
            torch.full((2, 1), t + 1.0),
            torch.zeros(2, dtype=torch.bool),
            torch.zeros(2, dtype=torch.bool),
        )
        if rows is not None:
            rb.add(**rows)
    assert len(rb) == 4 and rb.discount[:4].tolist() == [0.25] * 4
    assert rb.rewards[:4].tolist() == [1.5] * 4
    assert set(rb.sample(3)) == {"obs", "actions", "rewards", "next_obs", "terminated", "discount"}
