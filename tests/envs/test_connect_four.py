"""Connect Four and self-play: the rules move for move against PettingZoo's ``connect_four_v3``,
the env's games against an opponent, the masked policy, the league's ratings and state, the
scripted player, and the ``connect-four`` task trained, evaluated and resumed bit for bit."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from distrl.config import PolicyConfig
from distrl.envs.connect_four import (
    COLS,
    OBS_DIM,
    ROWS,
    ConnectFour,
    drop,
    four_in_a_row,
    observe,
    one_step_lookahead,
)
from distrl.envs.league import League, Scripted, play_games
from distrl.policy.actor_critic import ActorCritic
from tests.helpers import TIMING_KEYS

HAS_PETTINGZOO = all(importlib.util.find_spec(m) for m in ("pettingzoo", "pygame"))


def board_of(moves: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    board = torch.zeros(1, ROWS, COLS, dtype=torch.int8)
    heights = torch.zeros(1, COLS, dtype=torch.int64)
    colour = 1
    for c in moves:
        drop(
            board,
            heights,
            torch.tensor([0]),
            torch.tensor([c]),
            torch.tensor([colour], dtype=torch.int8),
        )
        colour = -colour
    return board, heights


@pytest.mark.skipif(not HAS_PETTINGZOO, reason="pip install pettingzoo pygame (the reference)")
def test_the_rules_match_pettingzoo_move_for_move():
    from pettingzoo.classic import connect_four_v3

    rng = np.random.default_rng(0)
    endings = {"win": 0, "draw": 0}
    for game in range(60):
        ref = connect_four_v3.env()
        ref.reset(seed=game)
        board = torch.zeros(1, ROWS, COLS, dtype=torch.int8)
        heights = torch.zeros(1, COLS, dtype=torch.int64)
        colour = torch.tensor([1], dtype=torch.int8)
        while True:
            obs, _, term, trunc, _ = ref.last()
            ours = observe(board, heights, colour)[0]
            planes = torch.as_tensor(obs["observation"]).permute(2, 0, 1).reshape(-1).float()
            assert torch.equal(ours[: 2 * ROWS * COLS], planes), f"game {game}"
            assert torch.equal(ours[-COLS:], torch.as_tensor(obs["action_mask"]).float())
            if term or trunc:
                break
            move = int(rng.choice(np.flatnonzero(obs["action_mask"])))
            ref.step(move)
            drop(board, heights, torch.tensor([0]), torch.tensor([move]), colour)
            won = bool(four_in_a_row(board == colour.view(-1, 1, 1))[0])
            full = bool((heights == ROWS).all())
            ended = any(ref.terminations.values())
            assert ended == (won or full), f"game {game}: the end differs"
            if ended:
                mover = ref.agents[0] if colour.item() == 1 else ref.agents[1]
                assert ref.rewards[mover] == (1 if won else 0)
                endings["win" if won else "draw"] += 1
            colour = -colour
    assert endings["win"] > 40  # random games mostly end in a win


def test_four_in_a_row_in_every_direction():
    assert four_in_a_row(board_of([0, 6, 1, 6, 2, 6, 3])[0] == 1)  # across
    assert four_in_a_row(board_of([0, 1, 0, 1, 0, 1, 0])[0] == 1)  # down
    diagonal = [0, 1, 1, 2, 2, 3, 2, 3, 3, 6, 3]
    assert four_in_a_row(board_of(diagonal)[0] == 1)
    assert not four_in_a_row(board_of([0, 1, 2, 3, 4, 5, 6])[0] == 1)


class Fixed:
    """An opponent that always plays ``column`` (or the leftmost legal one)."""

    def __init__(self, column: int) -> None:
        self.column = column
        self.games: list[float] = []

    def sample(self, n, generator):
        return torch.zeros(n, dtype=torch.int64)

    def act(self, obs, who, generator):
        mask = obs[:, -COLS:].bool()
        pick = torch.full((obs.shape[0],), self.column)
        return torch.where(mask[:, self.column], pick, mask.float().argmax(1))

    def record(self, who, outcome):
        self.games += outcome.tolist()


def test_a_game_against_an_opponent_ends_with_the_right_reward():
    env = ConnectFour(1, "cpu")
    env.opponents = Fixed(6)
    obs = env.reset(seed=0)
    assert obs.shape == (1, OBS_DIM)
    first = env.seat.item() == 1  # the learner's colour
    rewards = []
    for _ in range(4):  # four in column 0 while the opponent stacks column 6
        obs, reward, terminated, truncated, info = env.step(torch.tensor([0]))
        rewards.append(reward.item())
        if terminated.item():
            break
    if first:
        assert rewards[-1] == 1.0 and info["outcome"].item() == 1.0
    else:  # the opponent started in column 6 and gets its four first
        assert rewards[-1] == -1.0 and info["outcome"].item() == 0.0
    assert env.opponents.games == [info["outcome"].item()]
    assert env.heights.sum() <= 1  # a new game began in the same step


def test_an_illegal_move_loses_and_the_mask_says_which_are_legal():
    env = ConnectFour(1, "cpu")
    env.opponents = Fixed(0)  # the opponent fills column 0 with the learner
    obs = env.reset(seed=1)
    for _ in range(6):
        if not obs[0, -COLS].item():
            break
        obs, reward, terminated, *_ = env.step(torch.tensor([0]))
        if terminated.item():
            pytest.skip("the game ended before the column filled")
    assert obs[0, -COLS].item() == 0.0  # column 0 is full: masked
    _, reward, terminated, *_ = env.step(torch.tensor([0]))
    assert reward.item() == -1.0 and terminated.item()


def test_the_masked_policy_never_picks_an_illegal_column():
    env = ConnectFour(64, "cpu")
    policy = ActorCritic(OBS_DIM, env.action_space, PolicyConfig(obs_normalization=False))
    obs = env.reset(seed=0)
    obs[:, -COLS:] = 0.0
    obs[:, -COLS + 3] = 1.0  # only column 3 is legal
    for _ in range(5):
        actions, logp, _ = policy.act(obs)
        assert (actions == 3).all() and torch.allclose(logp, torch.zeros_like(logp), atol=1e-6)
    logp, entropy, _ = policy.evaluate(obs, actions)
    assert torch.isfinite(entropy).all() and entropy.abs().max() < 1e-5
    assert (policy.act_deterministic(obs) == 3).all()


def test_the_scripted_player_wins_and_blocks():
    board, heights = board_of([0, 6, 1, 6, 2])  # first player threatens 0-1-2-3
    mover = torch.tensor([-1], dtype=torch.int8)  # second player to move: must block 3
    obs = observe(board, heights, mover)
    assert one_step_lookahead(obs, torch.Generator().manual_seed(0)).item() == 3
    board, heights = board_of([0, 6, 1, 6, 2, 6])  # first player to move: wins at 3
    obs = observe(board, heights, torch.tensor([1], dtype=torch.int8))
    assert one_step_lookahead(obs, torch.Generator().manual_seed(0)).item() == 3


def test_the_league_rates_samples_and_restores():
    policy = ActorCritic(OBS_DIM, ConnectFour(1, "cpu").action_space, PolicyConfig())
    league = League(torch.device("cpu"), capacity=2, random_share=0.0)
    g = torch.Generator().manual_seed(0)
    assert (league.sample(5, g) == -1).all()  # no network yet: the random player
    league.attach(policy)
    for it in (0, 10, 20):
        league.add(policy, it)
    assert league.added_at == [20, 10]  # the newest replaced the oldest
    who = league.sample(1000, g)
    assert set(who.tolist()) == {0, 1}
    league.record(torch.tensor([0, 0, 0, 1]), torch.tensor([1.0, 1.0, 1.0, 0.5]))
    assert league.learner_rating > 1000 and float(league.ratings[0]) < 1000
    figures = league.metrics()
    assert figures["league/score_vs_league"] == pytest.approx(3.5 / 4)
    assert "league/score_vs_league" not in league.metrics()  # since the last call only
    again = League(torch.device("cpu"), capacity=2)
    again.load_state_dict(league.state_dict())
    assert again.learner_rating == league.learner_rating and again.added_at == [20, 10]
    moves = league.act(
        torch.zeros(4, OBS_DIM) + torch.eye(OBS_DIM)[-1], torch.tensor([0, 1, 0, 1]), g
    )
    assert (moves == COLS - 1).all()  # the only legal column


def test_a_policy_that_plays_the_centre_beats_random():
    class Centre(torch.nn.Module):
        def act_deterministic(self, obs):
            legal = obs[:, -COLS:].bool()
            return torch.where(legal[:, 3], 3, legal.float().argmax(1))

    r = play_games(Centre(), Scripted(lookahead=False), 200, seed=0, device=torch.device("cpu"))
    assert r["win"] + r["draw"] + r["loss"] == pytest.approx(1.0)
    assert r["win"] > 0.5  # stacking the centre wins most games against random moves


@pytest.mark.timeout(120)
def test_self_play_trains_rates_and_resumes_bit_for_bit(tmp_path):
    """Twelve iterations against the league (a snapshot at 0 and 10, the evaluation at the end)
    equal six, stopped, then resumed to twelve: weights, league, ratings and records."""
    from distrl.args import parse_train_args
    from distrl.session import run_training
    from distrl.telemetry import read_metrics
    from tests.helpers import assert_same, final_state, tiny_train_args

    def train(run_dir, *extra):
        argv = ["connect-four", *tiny_train_args(32), "--agent.max-iterations", "12"]
        return run_training(parse_train_args([*argv, "--run-dir", str(run_dir), *extra]))

    train(tmp_path / "whole")
    for stop in ("6", "12"):
        train(tmp_path / "parts", "--agent.stop-at", stop, "--resume", "auto")
    whole, parts = final_state(tmp_path / "whole", 12), final_state(tmp_path / "parts", 12)
    assert_same(parts["policy"], whole["policy"], "policy")
    league = whole["ranks"][0]["env"]["league"]
    assert league["added_at"] == [0, 10]
    assert_same(parts["ranks"][0]["env"]["league"], league, "league")
    records = read_metrics(tmp_path / "whole")
    assert records[-1]["league/size"] == 2 and "selfplay/win_vs_random" in records[-1]
    assert records[-1]["league/elo"] != 1000.0
    strip = TIMING_KEYS
    same = [{k: v for k, v in r.items() if not k.startswith(strip)} for r in records]
    again = [{k: v for k, v in r.items() if not k.startswith(strip)}
             for r in read_metrics(tmp_path / "parts")]  # fmt: skip
    assert again == same


def test_the_q_learners_refuse_a_masked_task_before_it_starts(tmp_path, capsys):
    from tests.helpers import run_main

    code, _, err = run_main(["train", "connect-four", "--algorithm", "pqn", "--run-dir",
                             str(tmp_path / "run")], capsys)  # fmt: skip
    assert code == 2 and "does not read a legal-action mask" in err
    assert not (tmp_path / "run").exists()
