"""The off-policy learners: their pure pieces against references, a resume that continues bit
for bit with the replay in the checkpoint, and the refusals a user meets first."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import distrl
from distrl.algorithms.off_policy import epsilon_greedy, polyak
from distrl.algorithms.pqn import q_lambda_returns
from distrl.args import parse_train_args
from distrl.hooks import Hooks
from distrl.policy.heads import SquashedGaussian
from distrl.session import run_training
from distrl.storage.replay import ReplayBuffer
from tests.helpers import QUIET, assert_same, final_state

# ---- pure pieces -------------------------------------------------------------------------


def naive_q_lambda(r, term, trunc, next_q, final_q, gamma, lam):
    """Q(lambda) returns written as the lambda-mixture of n-step returns, per env and step."""
    T, N = r.shape
    out = torch.zeros(T, N, dtype=torch.float64)
    for n in range(N):
        for t in range(T):
            total, weight, g, disc = 0.0, 1.0, 0.0, 1.0
            k = t
            while True:
                g += disc * float(r[k, n])
                disc *= gamma
                if term[k, n]:
                    total += weight * g
                    break
                if trunc[k, n]:
                    total += weight * (g + disc * float(final_q[k, n]))
                    break
                boot = g + disc * float(next_q[k, n])
                if k == T - 1:
                    total += weight * boot
                    break
                total += weight * (1 - lam) * boot
                weight *= lam
                k += 1
            out[t, n] = total
    return out


def test_q_lambda_returns_are_the_mixture_of_n_step_returns():
    g = torch.Generator().manual_seed(0)
    T, N = 9, 5
    r = torch.randn(T, N, generator=g, dtype=torch.float64)
    term = torch.rand(T, N, generator=g) < 0.15
    trunc = (torch.rand(T, N, generator=g) < 0.15) & ~term
    next_q = torch.randn(T, N, generator=g, dtype=torch.float64)
    final_q = torch.randn(T, N, generator=g, dtype=torch.float64)
    got = q_lambda_returns(r, term, trunc, next_q, final_q, 0.9, 0.65)
    torch.testing.assert_close(got, naive_q_lambda(r, term, trunc, next_q, final_q, 0.9, 0.65))


def test_squashed_gaussian_log_prob_matches_torch_distributions():
    from torch.distributions import Normal, TanhTransform, TransformedDistribution

    head = SquashedGaussian((-2.0, -1.0), (2.0, 3.0))
    torch.manual_seed(1)  # before the outputs too: they came from whatever state earlier tests left
    out = torch.randn(64, 4)
    unit, logp = head.sample(out)
    mean, log_std = out.chunk(2, -1)
    log_std = -5.0 + 3.5 * (torch.tanh(log_std) + 1.0)
    dist = TransformedDistribution(Normal(mean, log_std.exp()), TanhTransform())
    ref = dist.log_prob(unit).sum(-1)
    inside = unit.abs().max(-1).values < 0.99  # the +1e-6 of the log only matters at the edges
    assert inside.sum() > 40
    torch.testing.assert_close(logp[inside], ref[inside], atol=2e-3, rtol=1e-3)
    assert torch.equal(head(out), head.to_env(torch.tanh(mean)))
    assert (head(out) >= torch.tensor([-2.0, -1.0])).all()


def test_epsilon_greedy_and_polyak():
    q = torch.tensor([[0.0, 1.0, 0.5]] * 1000)
    assert epsilon_greedy(q, 0.0).eq(1).all()
    torch.manual_seed(0)
    share = epsilon_greedy(q, 0.3).ne(1).float().mean()  # 0.3 x 2/3 explore elsewhere
    assert abs(float(share) - 0.2) < 0.04
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    want = 0.9 * a.weight.detach() + 0.1 * b.weight.detach()
    polyak(a, b, 0.1)
    torch.testing.assert_close(a.weight.detach(), want)
    polyak(a, b, 1.0)
    assert torch.equal(a.weight, b.weight)


def test_replay_ring_wraps_samples_and_round_trips():
    rb = ReplayBuffer(10, 2, torch.uint8, (), torch.long, torch.device("cpu"), seed=3)
    for step in range(4):  # 4 steps x 3 envs = 12 rows: the first two are overwritten
        obs = torch.full((3, 2), step, dtype=torch.uint8)
        rb.add(
            obs,
            torch.arange(3) + 10 * step,
            torch.ones(3),
            obs + 1,
            torch.zeros(3, dtype=torch.bool),
        )
    assert len(rb) == 10 and rb.pos == 2 and rb.obs.dtype == torch.uint8
    assert sorted(rb.actions.tolist()) == [2, 10, 11, 12, 20, 21, 22, 30, 31, 32]
    twin = ReplayBuffer(10, 2, torch.uint8, (), torch.long, torch.device("cpu"), seed=99)
    twin.load_state_dict(rb.state_dict())
    assert_same(rb.sample(7), twin.sample(7), "sample after a round trip")
    state = rb.state_dict()
    state["obs"] = state["obs"][:5]  # a truncated file
    with pytest.raises(ValueError, match="truncated"):
        twin.load_state_dict(state)
    state = rb.state_dict()
    state["capacity"] = 20
    with pytest.raises(ValueError, match="buffer-size"):
        twin.load_state_dict(state)


def test_a_checkpoint_holds_the_filled_rows_not_the_whole_ring():
    """torch.save of the filled rows' view wrote the whole ring's storage: a one-iteration
    pendulum SAC run with a 2M-transition replay wrote 64.5 MiB (1.7 MiB now)."""
    import io

    rb = ReplayBuffer(100_000, 8, torch.float32, (1,), torch.float32, torch.device("cpu"), seed=0)
    rb.add(torch.ones(4, 8), torch.zeros(4, 1), torch.ones(4), torch.ones(4, 8),
           torch.zeros(4, dtype=torch.bool))  # fmt: skip
    buf = io.BytesIO()
    torch.save(rb.state_dict(), buf)
    assert buf.tell() < 50_000  # 4 rows, not 100,000 x 8 floats (6.4 MB)


# ---- through the real entry point -----------------------------------------------------------

SMALL = {
    "dqn": ["cartpole", "--env.num-envs", "4", "--agent.num-steps", "4"],
    "pqn": ["cartpole", "--env.num-envs", "4", "--agent.num-steps", "8"],
    "sac": ["pendulum", "--env.num-envs", "2", "--agent.num-steps", "4"],
    "td3": ["pendulum", "--env.num-envs", "2", "--agent.num-steps", "4"],
}
REPLAY = [
    "--offpolicy.learning-starts",
    "24",
    "--offpolicy.updates",
    "3",
    "--offpolicy.batch-size",
    "16",
    "--offpolicy.buffer-size",
    "40",
]
NETS = ["--policy.actor-hidden", "16", "16", "--policy.critic-hidden", "16", "16"]


class StopAt(Hooks):
    """Stops the run after ``iteration`` (with the final checkpoint), as an interruption does."""

    def __init__(self, iteration: int):
        self.iteration = iteration

    def after_iteration(self, runner, record) -> bool:
        return runner.iteration < self.iteration


def train(
    algorithm: str, run_dir: Path, iterations: int, *extra: str, stop: int | None = None
) -> dict:
    task, *rest = SMALL[algorithm]
    steps = int(rest[1]) * int(rest[3])
    argv = [
        task,
        "--algorithm",
        algorithm,
        *rest,
        *NETS,
        "--agent.total-timesteps",
        str(iterations * steps),
        "--run-dir",
        str(run_dir),
        *QUIET,
        *extra,
    ]
    if algorithm != "pqn":
        argv += REPLAY
    hooks = [StopAt(stop)] if stop is not None else []
    return run_training(parse_train_args(argv), hooks)


@pytest.mark.parametrize("algorithm", ["dqn", "pqn", "sac", "td3"])
def test_resume_continues_bit_for_bit_with_the_replay(algorithm, tmp_path, capsys):
    full, part = tmp_path / "full", tmp_path / "part"
    train(algorithm, full, 8, "--agent.save-interval", "4")
    train(algorithm, part, 8, "--agent.save-interval", "4", stop=4)  # schedules of 8
    train(algorithm, part, 8, "--agent.save-interval", "4", "--resume", "auto")
    assert "resume: loaded" in capsys.readouterr().out
    a, b = final_state(full, 8), final_state(part, 8)
    assert_same(a, b, algorithm)
    if algorithm != "pqn":  # the ring wrapped: 8 x 8 or 8 x 16 rows in 40
        replay = a["ranks"][0]["replay"]
        assert replay["size"] == 40 and replay["obs"].shape[0] == 40


N_STEP_PRIORITIZED = ("--offpolicy.n-step", "3", "--offpolicy.prioritized", "True")


@pytest.mark.parametrize(
    ("algorithm", "extra"),
    [
        ("dqn", N_STEP_PRIORITIZED),
        ("td3", ("--offpolicy.n-step", "2")),
        ("sac", ("--offpolicy.n-step", "2", "--offpolicy.prioritized", "True")),
    ],
    ids=["dqn-n3-prioritized", "td3-n2", "sac-n2-prioritized"],
)
def test_resume_continues_bit_for_bit_with_n_step_rows_and_priorities(
    algorithm, extra, tmp_path, capsys
):
    """The n-step window and the priorities are in the state: the resumed run stores the same
    rows, draws the same minibatches and ends with the same weights and priorities."""
    full, part = tmp_path / "full", tmp_path / "part"
    train(algorithm, full, 8, "--agent.save-interval", "4", *extra)
    train(algorithm, part, 8, "--agent.save-interval", "4", *extra, stop=4)
    train(algorithm, part, 8, "--agent.save-interval", "4", *extra, "--resume", "auto")
    assert "resume: loaded" in capsys.readouterr().out
    a, b = final_state(full, 8), final_state(part, 8)
    assert_same(a, b, algorithm)
    mine = a["ranks"][0]
    n = int(extra[1])
    assert mine["nstep"]["n"] == n and mine["nstep"]["count"] == n - 1
    assert mine["replay"]["size"] == 40 and mine["replay"]["discount"].shape == (40,)
    assert (mine["replay"]["discount"] > 0).all()
    if "--offpolicy.prioritized" in extra:  # the updates moved the priorities off the initial 1
        assert mine["replay"]["priorities"].shape == (40,)
        assert not torch.equal(mine["replay"]["priorities"], torch.ones(40, dtype=torch.float64))


def test_resume_with_another_n_step_is_refused(tmp_path):
    run = tmp_path / "run"
    train("dqn", run, 6, "--agent.save-interval", "4", "--offpolicy.n-step", "3", stop=4)
    with pytest.raises(ValueError, match="--offpolicy.n-step"):
        train("dqn", run, 6, "--agent.save-interval", "4", "--resume", "auto")


def test_resume_without_the_replay_says_it_refills(tmp_path, capsys):
    run = tmp_path / "run"
    train("dqn", run, 6, "--agent.save-interval", "4", "--offpolicy.save-replay", "False", stop=4)
    state = final_state(run, 4)
    assert state["ranks"][0]["replay"]["size"] == 0 and "obs" not in state["ranks"][0]["replay"]
    train(
        "dqn",
        run,
        6,
        "--agent.save-interval",
        "4",
        "--offpolicy.save-replay",
        "False",
        "--resume",
        "auto",
    )
    assert "holds no replay" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pendulum", "--algorithm", "dqn"], "one discrete action"),
        (["cartpole", "--algorithm", "sac"], "continuous actions"),
        (["cartpole", "--algorithm", "SAC2"], "unknown"),
        (["cartpole", "--algorithm", "ddpg"], "td3"),
        (["cartpole", "--offpolicy.tau", "0.1"], "applies to --algorithm dqn, sac, td3"),
        (["cartpole", "--algorithm", "pqn", "--offpolicy.buffer-size", "10"], "not to PQN"),
        (["reach10", "--algorithm", "sac"], "trains with episodic RLOO"),
        (["cartpole", "--algorithm", "rloo"], "not one of them"),
        (["cartpole", "--algorithm", "pqn", "--agent.lr-schedule", "adaptive"], "PPO's KL"),
        (["pendulum", "--algorithm", "sac", "--policy.head", "tanh"], "trains --policy.head"),
        (["cartpole", "--offpolicy.n-step", "3"], "applies to --algorithm dqn, sac, td3"),
        (["cartpole", "--algorithm", "pqn", "--offpolicy.n-step", "3"], "not to PQN"),
        (
            ["pendulum", "--algorithm", "pqn", "--offpolicy.prioritized", "True"],
            "--offpolicy.prioritized applies to --algorithm dqn, sac, td3, not to PQN",
        ),
        (
            ["cartpole", "--algorithm", "dqn", "--offpolicy.priority-beta", "0.5"],
            "--offpolicy.priority-beta has no effect without --offpolicy.prioritized",
        ),
        (["cartpole", "--algorithm", "dqn", "--offpolicy.n-step", "0"], "n-step must be positive"),
    ],
)
def test_refusals_name_the_fix(argv, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        cfg = parse_train_args([*argv, "--run-dir", str(tmp_path), *QUIET])
        run_training(cfg)


def test_the_algorithms_defaults_come_before_the_users_flags():
    cfg = parse_train_args(["pendulum", "--algorithm", "sac"])
    assert cfg.policy.head == "squashed-gaussian" and cfg.agent.max_iterations == -(-20_000 // 64)
    assert cfg.agent.total_timesteps is None  # a budget of the user's wins, as for ppo
    cfg = parse_train_args(["pendulum", "--agent.max-iterations", "7", "--algorithm", "sac"])
    assert cfg.agent.max_iterations == 7 and cfg.agent.learning_rate == 1e-3
    cfg = parse_train_args(["pendulum", "--algorithm=td3", "--agent.learning-rate", "5e-4"])
    assert cfg.policy.head == "tanh" and cfg.agent.learning_rate == 5e-4
    assert distrl.make_config("cartpole", algorithm="pqn").policy.layer_norm


def test_pqn_on_minatar_takes_its_authors_minatar_settings():
    """purejaxql's pqn_minatar.yaml per rank, on the task's CNN with LayerNorm; other tasks
    keep CleanRL's settings, and the user's flags still win."""
    cfg = parse_train_args(["minatar-breakout", "--algorithm", "pqn"])
    a, o = cfg.agent, cfg.offpolicy
    assert (cfg.env.num_envs, a.num_steps, a.num_epochs, a.num_minibatches) == (128, 32, 2, 32)
    assert (a.learning_rate, a.lr_schedule, o.eps_fraction, o.q_lambda) == (
        5e-4,
        "linear",
        0.1,
        0.65,
    )
    assert cfg.policy.network == "minatar-cnn" and cfg.policy.layer_norm
    assert a.max_iterations == -(-5_000_000 // (128 * 32))
    cfg = parse_train_args(["cartpole", "--algorithm", "pqn"])
    assert (cfg.env.num_envs, cfg.agent.num_epochs, cfg.offpolicy.eps_fraction) == (32, 4, 0.5)
    cfg = parse_train_args(["minatar-asterix", "--algorithm", "pqn", "--env.num-envs", "64"])
    assert cfg.env.num_envs == 64 and cfg.agent.num_minibatches == 32


def test_refused_under_strategies_that_cannot_run_them():
    from distrl.runner.algorithms import check_compatible

    cfg = parse_train_args(["pendulum", "--algorithm", "sac", "--dist.strategy", "ps-bsp"])
    with pytest.raises(ValueError, match="target networks"):
        check_compatible(cfg, 3)
    cfg = parse_train_args(["pendulum", "--algorithm", "sac", "--dist.strategy", "elastic"])
    with pytest.raises(ValueError, match="replay"):
        check_compatible(cfg, 2)
    cfg = parse_train_args(["cartpole", "--algorithm", "pqn", "--dist.strategy", "elastic"])
    assert check_compatible(cfg, 2).name == "PQN"


def test_sac_policy_deploys_its_squashed_mean(tmp_path):
    """The saved policy is what evaluate, play and export load: its deterministic action is the
    squashed mean inside the bounds."""
    from distrl.rundir import load_policy

    train("sac", tmp_path, 8)
    policy, cfg = load_policy(tmp_path)
    assert cfg.algorithm == "sac" and cfg.policy.head == "squashed-gaussian"
    with torch.no_grad():
        a = policy.act_deterministic(torch.randn(32, 3) * 5)
    assert a.shape == (32, 1) and a.abs().max() <= 2.0 and math.isfinite(float(a.sum()))
    from distrl.exporting import export_policy

    out = export_policy(tmp_path, "torchscript")  # with its parity check against the policy
    assert "squashed by tanh" in out.metadata["computes"] and out.max_abs_diff <= 1e-5
    scripted = torch.jit.load(str(out.path))
    obs = torch.randn(4, 3)
    torch.testing.assert_close(scripted(obs), policy.act_deterministic(obs).detach())


@pytest.mark.parametrize("algorithm", ["dqn", "pqn"])
def test_pixels_train_through_the_cnn_with_uint8_kept(algorithm, tmp_path):
    """MinAtar's uint8 grids through minatar-cnn: the replay (and PQN's rollout) keep bytes."""
    argv = ["minatar-breakout", "--algorithm", algorithm, "--env.num-envs", "4"]
    argv += ["--agent.num-steps", "4", "--agent.total-timesteps", "64", *QUIET]
    argv += ["--run-dir", str(tmp_path), "--agent.save-interval", "4"]
    if algorithm == "dqn":
        argv += ["--offpolicy.learning-starts", "16", "--offpolicy.updates", "2"]
        argv += ["--offpolicy.batch-size", "8", "--offpolicy.buffer-size", "64"]
    else:  # MinAtar's 32 minibatches do not divide this 16-row rollout
        argv += ["--agent.num-minibatches", "2"]
    run_training(parse_train_args(argv))
    state = final_state(tmp_path, 4)
    assert any(k.startswith("encoder.") for k in state["policy"])
    if algorithm == "dqn":
        replay = state["ranks"][0]["replay"]
        assert replay["obs"].dtype == torch.uint8 and replay["size"] == 64
