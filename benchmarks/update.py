"""`distrl bench update`: where one update of an off-policy learner goes, on this machine.

The learner is the one `distrl train TASK --algorithm ALGO` builds (its networks, its flat
gradient buffer, its optimizers), fed minibatches of random rows of the task's shapes
(``--offpolicy.batch-size`` rows; a replay's content does not change the arithmetic). Each
round runs ``--updates`` updates; the figures are medians over ``--repeats`` rounds after a
warm-up:

  forward   ``loss``: every network's forward and the losses
  backward  ``gradient`` less its forward: backward into the flat buffer, the decision
            scalars and the non-finite flag
  decide    ``decide``: the decision (one host read)
  apply     ``apply``: the norm clip, each group's Adam, the target networks' move

FLOPs per update come from torch's ``FlopCounterMode`` over one update; GFLOP/s is that over
the update's median time. ``--profile`` adds ``torch.profiler``'s operator table over one
round, and the share of the matrix products (``mm``, ``addmm``, ``bmm``) in it: the part of the
update no schedule of the same arithmetic can shorten on this device.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from benchmarks import common

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


@dataclass(frozen=True)
class UpdateArgs:
    algorithm: str = "sac"
    """An off-policy learner: sac, td3, dqn (pqn learns from rollouts: not here)."""
    task: str = "halfcheetah"
    """The task whose shapes and defaults the learner takes."""
    threads: int = 1
    """Intra-op threads (torch.set_num_threads)."""
    updates: int = 50
    """Updates per timed round."""
    repeats: int = 7
    """Timed rounds; the figures are their medians."""
    profile: bool = False
    """Also print torch.profiler's operator table over one round."""
    flags: str = ""
    """More train flags for the learner's config: --flags="--policy.critic-hidden 64 64"."""
    out: str | None = None
    """Results directory (default bench_out/update)."""


def _learner(a: UpdateArgs):  # noqa: ANN202 (an OffPolicyLearner and a batch maker)
    import shlex

    from distrl.args import parse_train_args
    from distrl.envs.registry import make_env
    from distrl.policy.actor_critic import ActorCritic
    from distrl.runner.off_policy import LEARNERS, check_off_policy_env

    if a.algorithm not in LEARNERS or a.algorithm == "pqn":
        raise ValueError(f"--algorithm {a.algorithm}: choose a replay learner (sac, td3, dqn)")
    cfg = parse_train_args([a.task, "--algorithm", a.algorithm, *shlex.split(a.flags)])
    env = make_env(cfg, "cpu")
    check_off_policy_env(cfg, env)
    policy = ActorCritic.for_env(env, cfg.policy)
    learner = LEARNERS[a.algorithm](policy, cfg)
    space, B, dim = env.action_space, cfg.offpolicy.batch_size, env.obs_dim
    g = torch.Generator().manual_seed(0)

    def obs() -> torch.Tensor:
        if policy.obs_dtype == torch.uint8:
            return torch.randint(0, 2, (B, dim), generator=g, dtype=torch.uint8)
        return torch.randn(B, dim, generator=g)

    def batch() -> dict[str, torch.Tensor]:
        if space.categorical:
            actions = torch.randint(0, space.n, (B,), generator=g)
        else:
            actions = torch.rand(B, len(space.low), generator=g) * 2 - 1
        return {
            "obs": obs(),
            "next_obs": obs(),
            "actions": actions,
            "rewards": torch.randn(B, generator=g),
            "terminated": torch.rand(B, generator=g) < 0.01,
        }

    env.close()
    return learner, batch, B


def update(a: UpdateArgs) -> dict:
    torch.set_num_threads(a.threads)
    m = common.header("distrl bench update")
    learner, batch, B = _learner(a)
    rows = [batch() for _ in range(a.updates)]

    def one(b: dict[str, torch.Tensor], parts: dict[str, float] | None) -> None:
        t0 = time.perf_counter()
        if parts is not None:  # the forward alone, then the whole gradient (forward again)
            learner.loss(b)
            t1 = time.perf_counter()
            parts["forward"] += t1 - t0
            t0 = time.perf_counter()
        flat = learner.gradient(b)
        t2 = time.perf_counter()
        learner.decide(flat)
        t3 = time.perf_counter()
        learner.apply()
        t4 = time.perf_counter()
        if parts is not None:
            parts["gradient"] += t2 - t0
            parts["decide"] += t3 - t2
            parts["apply"] += t4 - t3

    for b in rows[:10]:  # warm-up
        one(b, None)
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        one(rows[0], None)
    flops = counter.get_total_flops()
    totals: list[float] = []
    split: dict[str, list[float]] = {k: [] for k in ("forward", "backward", "decide", "apply")}
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        for b in rows:
            one(b, None)
        totals.append((time.perf_counter() - t0) / a.updates)
        parts = dict.fromkeys(("forward", "gradient", "decide", "apply"), 0.0)
        for b in rows:
            one(b, parts)
        split["forward"].append(parts["forward"] / a.updates)
        split["backward"].append((parts["gradient"] - parts["forward"]) / a.updates)
        split["decide"].append(parts["decide"] / a.updates)
        split["apply"].append(parts["apply"] / a.updates)
    ms = statistics.median(totals) * 1e3
    row = {
        "algorithm": a.algorithm,
        "task": a.task,
        "batch": B,
        "threads": a.threads,
        "mflop_per_update": round(flops / 1e6, 3),
        "ms_per_update": round(ms, 3),
        "gflops": round(flops / ms / 1e6, 3),
        **{f"ms_{k}": round(statistics.median(v) * 1e3, 3) for k, v in split.items()},
        "cpu": m["cpu"],
        "torch": m["torch"],
    }
    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for b in rows:
                one(b, None)
        events = prof.key_averages()
        whole = sum(e.self_cpu_time_total for e in events)
        mm = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
        row["matmul_share"] = round(mm / whole, 3) if whole else 0.0
        row["ms_matmul"] = round(mm / 1e3 / a.updates, 3)
        common.console.print(events.table(sort_by="self_cpu_time_total", row_limit=20))
    cols = ["algorithm", "task", "threads", "mflop_per_update", "ms_per_update", "gflops"]
    cols += [f"ms_{k}" for k in split] + (["ms_matmul", "matmul_share"] if a.profile else [])
    common.print_table(f"one {a.algorithm} update on {a.task}", [row], cols)
    out = common.out_dir(a.out, "update")
    common.write_csv(out / f"{a.algorithm}-{a.task}-t{a.threads}.csv", [row])
    return row
