"""Population-based training's decisions, as pure functions: which members copy which, and how
a copied member's hyperparameters move. The processes, files and schedule are
``distrl/population.py``'s.

The rules are Ray Tune's ``PopulationBasedTraining`` defaults (its ``quantile_fraction`` 0.25,
``resample_probability`` 0.25, ``perturbation_factors`` (1.2, 0.8)), with synchronous
generations (Tune's ``synch=True``): every member has trained the same env steps when they are
ranked.

- **Exploit.** Members are ranked by their score; the worst ``fraction`` (at least one, at
  most half the population) each copy the whole training state of a member drawn uniformly
  from the best ``fraction``. A member with no score (its process failed, or it logged no
  ``--pbt.metric``) copies one of the best as well, beside them.
- **Explore.** Each field of the copied member's hyperparameters is, with probability
  ``resample``, drawn afresh from its range; otherwise perturbed: a number multiplied by
  ``1 + perturb`` or ``1 - perturb`` (at random) and kept inside its range, an integer rounded
  and moved by at least one, a choice moved to a neighbouring choice. A discount-like field
  (its range inside [0.9, 1): gamma, GAE's or Q's lambda) is perturbed through its horizon
  ``1 - value``, as Sample Factory perturbs gamma: 0.99 times 1.2 would leave the range, 1 -
  0.01 times 1.2 is 0.988.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distrl.sweep import Param

STRUCTURAL = ("task", "policy.", "env.num_envs", "env.max_episode_steps", "offpolicy.buffer_size")
"""Fields a copied training state cannot take another value of (the networks' and buffers'
shapes, the MDP): a population's members share them."""


def check_space(params: Sequence[Param]) -> None:
    """Refuse a field whose change a copied training state could not follow."""
    for p in params:
        if any(p.name == s or (s.endswith(".") and p.name.startswith(s)) for s in STRUCTURAL):
            raise ValueError(
                f"--pbt.space: {p.name} cannot change within a population (a member copies "
                f"another's training state, whose shapes and task it fixes); leave it out and "
                f"set it for the whole population with --{p.name.replace('_', '-')}"
            )


def holding(p: Param, value: Any) -> Param:
    """``p`` widened to hold ``value`` (the task's default, member 0's), so that a member that
    copies member 0 explores around its values rather than jumping into the range."""
    if p.type == "categorical":
        return p if value in p.choices else dataclasses.replace(p, choices=(*p.choices, value))
    assert p.low is not None and p.high is not None
    if not isinstance(value, int | float) or (p.log and value <= 0):
        return p
    return dataclasses.replace(p, low=min(p.low, value), high=max(p.high, value))


def horizon_like(p: Param) -> bool:
    """A discount-like field: perturbed through ``1 - value``."""
    return (
        p.type == "float"
        and p.low is not None
        and p.high is not None
        and (p.low >= 0.9 and p.high < 1.0)
    )


def sample(p: Param, rng: random.Random) -> Any:
    """A value drawn from ``p``'s whole range (log-uniform where ``p.log``)."""
    if p.type == "categorical":
        return rng.choice(list(p.choices))
    assert p.low is not None and p.high is not None
    if p.type == "int":
        return rng.randint(int(p.low), int(p.high))
    if p.log:
        return math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
    return rng.uniform(p.low, p.high)


def perturb(p: Param, value: Any, factor: float, rng: random.Random) -> Any:
    """``value`` moved by ``factor`` (``1 + perturb`` or ``1 - perturb``), inside ``p``'s range."""
    if p.type == "categorical":
        choices = list(p.choices)
        i = choices.index(value) if value in choices else 0
        step = 1 if factor > 1 else -1
        return choices[min(max(i + step, 0), len(choices) - 1)]
    assert p.low is not None and p.high is not None
    low, high = p.low, p.high
    if p.type == "int":
        moved = int(round(value * factor))
        if moved == value:
            moved = value + (1 if factor > 1 else -1)
        return int(min(max(moved, int(low)), int(high)))
    moved = 1.0 - (1.0 - value) * factor if horizon_like(p) else value * factor
    return float(min(max(moved, low), high))


def explore(
    params: Sequence[Param], values: dict[str, Any], resample: float, step: float,
    rng: random.Random,
) -> dict[str, Any]:  # fmt: skip
    """The hyperparameters a member that copied ``values``' owner trains with next."""
    out = {}
    for p in params:
        if rng.random() < resample:
            out[p.name] = sample(p, rng)
        else:
            factor = 1.0 + step if rng.random() < 0.5 else 1.0 - step
            out[p.name] = perturb(p, values[p.name], factor, rng)
    return out


@dataclass(frozen=True)
class Copy:
    """Member ``member`` takes member ``donor``'s training state."""

    member: int
    donor: int


def exploit(scores: Sequence[float | None], fraction: float, rng: random.Random) -> list[Copy]:
    """Which members copy which (see the module's docstring). ``scores[k]``: member k's score,
    higher is better (None: no score)."""
    n = len(scores)
    scored = sorted((k for k in range(n) if scores[k] is not None), key=lambda k: (scores[k], -k))
    lost = [k for k in range(n) if scores[k] is None]
    if not scored or n < 2:
        return []
    cut = min(max(1, int(n * fraction)), len(scored) // 2)
    worst = sorted([*lost, *scored[:cut]])
    best = scored[::-1][: max(1, cut)]
    return [Copy(k, rng.choice(best)) for k in worst]


def lineage(parents: Sequence[Sequence[int]], last: int) -> list[int]:
    """The member whose training state led to member ``last`` of the final generation, in each
    generation: ``parents[g][k]`` is the member whose state member k started generation g from
    (itself, unless it copied another at the end of generation g - 1)."""
    out = [last]
    for g in range(len(parents) - 1, 0, -1):
        out.append(parents[g][out[-1]])
    return out[::-1]
