"""Self-play with a league: the learner plays frozen past versions of itself.

``League`` holds up to ``capacity`` snapshots of the policy (its whole ``state_dict``: weights
and normalizer), taken every ``interval`` iterations by the ``SelfPlay`` hook; the newest
replaces the oldest once the league is full. Each new game draws its opponent: the uniformly
random player with probability ``random_share``, else a snapshot, uniformly over the league
(``rule="uniform"``) or by AlphaStar's prioritized fictitious self-play (``rule="pfsp"``:
weight ``(1 - w)^2`` for the learner's win rate ``w`` against that snapshot, so the versions it
still loses to come more often). A snapshot plays by sampling from its own masked policy.

Ratings are Elo (K = 16, all starting at 1000; a snapshot enters with the learner's rating at
the time): after each step, the games that ended against each opponent move the learner's and
that opponent's rating by K times the sum of (result - expected), results counted 1, 0.5, 0.
The random player is rated too. The league, its ratings and its counts are part of the env's
state, so a resumed run plays the same opponents.

Every rank keeps its own league. Under ``allreduce`` every rank snapshots the same weights at
the same iterations, so the leagues hold the same versions; the ratings and counts are the
rank's own games (rank 0's are logged). The opponents are drawn without any decision shared
between ranks.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from distrl.envs.connect_four import COLS, ConnectFour, one_step_lookahead
from distrl.hooks import Hooks

ELO_K = 16.0
RANDOM = -1


class League:
    """The learner's past versions, their ratings, and who plays whom (``Opponents``)."""

    def __init__(self, device: torch.device, capacity: int = 8, random_share: float = 0.2,
                 rule: str = "uniform") -> None:  # fmt: skip
        self.device = device
        self.capacity, self.random_share, self.rule = capacity, random_share, rule
        self.snapshots: list[dict[str, torch.Tensor]] = []
        self.added_at: list[int] = []
        self.ratings = torch.full((capacity,), 1000.0, dtype=torch.float64)
        self.random_rating = 1000.0
        self.learner_rating = 1000.0
        # per slot (and the random player last): [games, learner's points] since added
        self.record_all = torch.zeros(capacity + 1, 2, dtype=torch.float64)
        self.window = torch.zeros(capacity + 1, 2, dtype=torch.float64)  # since last read
        self.next_slot = 0
        self.played = False
        self.net: nn.Module | None = None

    # ---- the league's members
    def attach(self, policy: nn.Module) -> None:
        """The network the snapshots play with: a frozen copy of the learner's policy."""
        self.net = copy.deepcopy(policy).eval().requires_grad_(False)

    def add(self, policy: nn.Module, iteration: int) -> None:
        snap = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        slot = self.next_slot
        if slot < len(self.snapshots):
            self.snapshots[slot], self.added_at[slot] = snap, iteration
        else:
            self.snapshots.append(snap)
            self.added_at.append(iteration)
        self.ratings[slot] = self.learner_rating
        self.record_all[slot] = 0.0
        self.window[slot] = 0.0
        self.next_slot = (slot + 1) % self.capacity

    # ---- Opponents
    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        size = len(self.snapshots)
        if size == 0 or self.net is None:
            return torch.full((n,), RANDOM, dtype=torch.int64, device=self.device)
        u = torch.rand(n, generator=generator, device=self.device)
        weights = torch.ones(size, dtype=torch.float64)
        if self.rule == "pfsp":
            games, points = self.record_all[:size, 0], self.record_all[:size, 1]
            win = torch.where(games > 0, points / games.clamp(min=1), 0.5)
            weights = (1.0 - win) ** 2 + 1e-3
        picks = torch.multinomial(
            weights.to(self.device, torch.float32).expand(n, -1), 1, generator=generator
        ).squeeze(1)
        return torch.where(u < self.random_share, RANDOM, picks)

    def act(self, obs: torch.Tensor, who: torch.Tensor, generator: torch.Generator
            ) -> torch.Tensor:  # fmt: skip
        assert self.net is not None
        moves = torch.empty(obs.shape[0], dtype=torch.int64, device=obs.device)
        with torch.no_grad():
            for slot in torch.unique(who).tolist():
                rows = torch.nonzero(who == slot).squeeze(1)
                self.net.load_state_dict(self.snapshots[slot])
                _, logits, _ = self.net.deterministic(obs[rows])  # type: ignore[operator]
                probs = torch.softmax(logits.float(), -1)
                moves[rows] = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        return moves

    def record(self, who: torch.Tensor, outcome: torch.Tensor) -> None:
        who, outcome = who.cpu(), outcome.cpu().double()
        self.played = True
        for slot in torch.unique(who).tolist():
            points = outcome[who == slot]
            row = self.capacity if slot == RANDOM else slot
            theirs = self.random_rating if slot == RANDOM else float(self.ratings[slot])
            expected = 1.0 / (1.0 + 10.0 ** ((theirs - self.learner_rating) / 400.0))
            delta = ELO_K * float((points - expected).sum())
            self.learner_rating += delta
            if slot == RANDOM:
                self.random_rating -= delta
            else:
                self.ratings[slot] -= delta
            for table in (self.record_all, self.window):
                table[row, 0] += points.numel()
                table[row, 1] += float(points.sum())

    # ---- metrics and state
    def metrics(self) -> dict[str, float]:
        """The league's figures since the last call (``league/*`` in the records)."""
        out = {"league/size": float(len(self.snapshots))}
        if not self.played:  # a rank that plays no games (a learner's): no ratings to show
            return out
        out |= {"league/elo": self.learner_rating, "league/elo_random": self.random_rating}
        if self.snapshots:
            out["league/elo_newest"] = float(self.ratings[(self.next_slot - 1) % self.capacity])
        vs_league = self.window[: self.capacity].sum(0)
        if vs_league[0] > 0:
            out["league/score_vs_league"] = float(vs_league[1] / vs_league[0])
        if self.window[self.capacity, 0] > 0:
            out["league/score_vs_random"] = float(
                self.window[self.capacity, 1] / self.window[self.capacity, 0]
            )
        self.window.zero_()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "snapshots": self.snapshots,
            "added_at": list(self.added_at),
            "ratings": self.ratings.clone(),
            "random_rating": self.random_rating,
            "learner_rating": self.learner_rating,
            "record_all": self.record_all.clone(),
            "next_slot": self.next_slot,
            "played": self.played,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.snapshots = [dict(s) for s in state["snapshots"]]
        self.added_at = [int(i) for i in state["added_at"]]
        self.ratings = state["ratings"].clone()
        self.random_rating = float(state["random_rating"])
        self.learner_rating = float(state["learner_rating"])
        self.record_all = state["record_all"].clone()
        self.next_slot = int(state["next_slot"])
        self.played = bool(state["played"])


class Scripted:
    """A fixed opponent for evaluation: ``one_step_lookahead`` (or random, ``lookahead``
    False)."""

    def __init__(self, lookahead: bool) -> None:
        self.lookahead = lookahead

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.int64, device=generator.device)

    def act(self, obs: torch.Tensor, who: torch.Tensor, generator: torch.Generator
            ) -> torch.Tensor:  # fmt: skip
        if self.lookahead:
            return one_step_lookahead(obs, generator)
        u = torch.rand(obs.shape[0], COLS, generator=generator, device=obs.device)
        return torch.where(obs[:, -COLS:].bool(), u, -1.0).argmax(1)

    def record(self, who: torch.Tensor, outcome: torch.Tensor) -> None:
        pass


def play_games(policy: nn.Module, opponent: Scripted, games: int, seed: int,
               device: torch.device) -> dict[str, float]:  # fmt: skip
    """The greedy policy's win, draw and loss rates over ``games`` games against ``opponent``
    (each game's colour drawn at random)."""
    env = ConnectFour(games, device)
    env.opponents = opponent
    obs = env.reset(seed=seed)
    result = torch.full((games,), -1.0, device=device)
    with torch.no_grad():
        for _ in range(env.limit):
            action = policy.act_deterministic(obs)  # type: ignore[operator]
            obs, _, terminated, _, info = env.step(action)
            first = terminated & (result < 0)
            result = torch.where(first, info["outcome"], result)
            if bool((result >= 0).all()):
                break
    return {
        "win": float((result == 1.0).float().mean()),
        "draw": float((result == 0.5).float().mean()),
        "loss": float((result == 0.0).float().mean()),
    }


class SelfPlay(Hooks):
    """The ``connect-four`` task's hook: the league's network and its first member at the
    start, a snapshot every ``interval`` iterations, ``league/*`` and, every ``eval_interval``
    iterations, the greedy policy's results against the random and the scripted player
    (``selfplay/*``) in the records. It keeps no state of its own: the league is the env's."""

    def __init__(self, interval: int = 10, eval_interval: int = 10, eval_games: int = 200
                 ) -> None:  # fmt: skip
        self.interval, self.eval_interval, self.eval_games = interval, eval_interval, eval_games

    @staticmethod
    def league_of(runner: Any) -> League | None:
        env = getattr(runner, "env", None)
        league = getattr(env, "opponents", None)
        return league if isinstance(league, League) else None

    def on_training_start(self, runner: Any) -> None:
        league = self.league_of(runner)
        if league is None:
            return
        league.attach(runner.policy)
        if not league.snapshots:
            league.add(runner.policy, runner.iteration)

    def on_record(self, runner: Any, record: dict[str, Any]) -> None:
        league = self.league_of(runner)
        if league is None:
            return
        record.update(league.metrics())
        it = int(record["iteration"])
        if it % self.interval == 0:  # every role: the weights this rank holds now
            league.add(runner.policy, it)
        last = it >= runner.cfg.agent.max_iterations  # not a pause (--agent.stop-at)
        due = self.eval_interval > 0 and (it % self.eval_interval == 0 or last)
        if due and runner.strategy.is_main:
            for name, lookahead in (("random", False), ("lookahead", True)):
                r = play_games(runner.policy, Scripted(lookahead), self.eval_games, seed=it,
                               device=league.device)  # fmt: skip
                record[f"selfplay/win_vs_{name}"] = r["win"]
                record[f"selfplay/loss_vs_{name}"] = r["loss"]


def make_env(num_envs: int, device: torch.device | str,
             max_episode_steps: int | None = None) -> ConnectFour:  # fmt: skip
    """The ``connect-four`` task's env: games against the learner's league."""
    env = ConnectFour(num_envs, device, max_episode_steps)
    env.opponents = League(env.device)
    return env
