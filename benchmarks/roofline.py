"""`distrl bench roofline`: how far one training iteration is from this machine's
matmul limit, phase by phase, all in one process.

1. **GEMMs of one iteration, from the policy itself.** A forward hook on every ``nn.Linear`` of
   the policy (``LinearTanh`` is one) records, during a warm-up iteration run exactly as the
   runner runs it, each call's rows m, ``in_features`` k and ``out_features`` n and the phase it
   ran in. Every call is the forward product x[m, k] @ Wᵀ[k, n]; a call with autograd on adds the
   backward products: grad-weight gᵀ[n, m] @ x[m, k] and, when its input needs a gradient (not
   the first layer), grad-input g[m, n] @ W[n, k]. A changed architecture changes the list.
2. **The machine's rate at those shapes.** Each distinct GEMM (kind, M, K, N) runs with
   ``torch.addmm``/``torch.mm`` in the layouts the update uses (Wᵀ as a transposed view; grad-weight
   as gᵀ @ x and as (xᵀ @ g)ᵀ, the faster counting),
   in a timed loop: warm-up, then the median per-call time of several repetitions.
3. **Bounds.** The machine limit: every FLOP at the peak rate (the best GFLOP/s of the
   iteration's shapes). The shape-aware bound: each GEMM at its own shape's measured time. Env
   physics is not a matmul: ``env.step`` alone on random actions, ``num_steps`` steps, counts at
   its measured time. Storage, the optimizer (a few thousand parameters) and the rest have no
   compute bound worth the name at these sizes: bound 0.
4. **The real iteration**, as ``distrl train`` runs it (``Runner.iterate``: rollout, NaN
   check, learn_step), split into phases by timers wrapped around the runner's own objects in
   this process only (instance attributes; ``distrl train`` runs the unwrapped code):

   rollout_policy   ``policy.act`` (and V(final obs) on truncations) during the rollout
   env_step         ``env.step`` during the rollout
   rollout_storage  the rest of the rollout: buffer writes, episode bookkeeping
   forward          ``PPO.gradient`` minus its backward: ``evaluate`` + ``ppo_loss``
   backward         ``PPO.backward``: ``loss.backward()`` into the flat buffer, the NaN flag
   optimizer        ``PPO.apply``: global-norm clip + Adam step
   other            the rest: GAE, batch statistics, minibatch gathers, decisions, normalizer,
                    episode statistics, the NaN check

   Phases are means over ``iterations`` iterations of the median round (of ``repeats``) and add
   up to its iteration time. The GEMM and env timings are interleaved with the rounds, so all
   see the same machine.

On a GPU every timer synchronizes the device, which removes the overlap of host and device work
that training has; read GPU splits with that in mind.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks import common


@dataclass(frozen=True)
class RooflineArgs:
    task: str = "cartpole"
    """Task whose configured update and rollout are measured (its tuned defaults)."""
    envs: int | None = None
    """Envs (default: the task's; rsl_rl's CartPole setup is 1024)."""
    steps: int | None = None
    """Steps per env per iteration (default: the task's)."""
    epochs: int | None = None
    """PPO epochs per iteration (default: the task's)."""
    minibatches: int | None = None
    """Minibatches per epoch (default: the task's)."""
    extra: tuple[str, ...] = ()
    """Extra `train` overrides, split like a shell: --extra="--policy.actor-hidden 128 128"."""
    iterations: int = 10
    """Timed iterations per round (after one warm-up iteration)."""
    repeats: int = 3
    """Rounds of (GEMM timing, env timing, iterations) in this process; the median is reported."""
    gemm_reps: int = 7
    """Timed repetitions per GEMM shape and round (each at least ~2 ms of calls)."""
    threads: int = 1
    """Intra-op threads (every figure is for this many)."""
    out: str | None = None
    """Results directory (default bench_out/roofline)."""


PHASES = {
    "rollout_policy": "rollout: policy act",
    "env_step": "rollout: env step",
    "rollout_storage": "rollout: storage",
    "forward": "update: forward",
    "backward": "update: backward",
    "optimizer": "update: clip + Adam",
    "other": "other (GAE, gathers, stats)",
}
"""Phase key -> what the table calls it, in iteration order."""

BOUND_KIND = {
    "rollout_policy": "matmul",
    "env_step": "env alone",
    "rollout_storage": "none (0)",
    "forward": "matmul",
    "backward": "matmul",
    "optimizer": "none (0)",
    "other": "matmul (GAE's V)",
}
"""What each phase's bound counts."""

REFERENCE = ("fwd", 512, 512, 512)
"""A square GEMM timed for context (a BLAS-friendly size); not part of any bound."""


# ---- configuration ---------------------------------------------------------------------------
def train_config(a: RooflineArgs):
    """The task's default config with the bench's overrides, parsed as `train` parses them."""
    from distrl.args import parse_train_args
    from distrl.envs.registry import get_task

    if get_task(a.task).suite is not None:
        raise ValueError(f"{a.task} is an episodic suite (RLOO runner); roofline measures PPO")
    argv = [a.task]
    for flag, value in (
        ("--env.num-envs", a.envs),
        ("--agent.num-steps", a.steps),
        ("--agent.num-epochs", a.epochs),
        ("--agent.num-minibatches", a.minibatches),
    ):
        if value is not None:
            argv += [flag, str(value)]
    argv += common.split_extra(a.extra)
    argv += ["--threads", str(a.threads), "--progress", "False", "--tensorboard", "False"]
    return parse_train_args(argv)


def config_columns(cfg, a: RooflineArgs, m: dict) -> dict[str, Any]:
    """Columns every CSV row carries: the measured configuration and the machine."""
    ag, pol = cfg.agent, cfg.policy
    return {
        "task": cfg.task,
        "num_envs": cfg.env.num_envs,
        "num_steps": ag.num_steps,
        "num_epochs": ag.num_epochs,
        "num_minibatches": ag.num_minibatches,
        "minibatch_size": cfg.minibatch_size,
        "actor_hidden": "x".join(map(str, pol.actor_hidden)),
        "critic_hidden": "x".join(map(str, pol.critic_hidden)),
        "activation": pol.activation,
        "threads": a.threads,
        "iterations": a.iterations,
        "repeats": a.repeats,
        "cpu": m["cpu"],
        "cores": m["cores"],
        "torch": m["torch"],
        "device": m["device"],
    }


# ---- timers around the runner's pieces -------------------------------------------------------
def device_sync(device: torch.device) -> Callable[[], None]:
    """Wait for the device's queued work (a no-op on CPU, where every op is synchronous)."""
    return torch.cuda.synchronize if device.type == "cuda" else lambda: None


class PhaseTimer:
    """Inclusive wall time per call path ("rollout/act", "learn/gradient/backward", ...) of the
    methods it wraps; the wrappers are instance attributes of the bench's own runner."""

    def __init__(self, device: torch.device):
        self.sync = device_sync(device)
        self.stack: list[str] = []
        self.totals: Counter[str] = Counter()

    @property
    def path(self) -> str:
        return "/".join(self.stack)

    def wrap(self, obj: Any, method: str, name: str) -> None:
        fn = getattr(obj, method)

        def timed(*args, **kwargs):
            self.stack.append(name)
            path = self.path
            self.sync()
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                # Seconds: a Counter of floats (typeshed types a Counter's values as int).
                self.totals[path] += time.perf_counter() - t0  # type: ignore[assignment]
                self.stack.pop()

        object.__setattr__(obj, method, timed)  # nn.Module.__setattr__ would do the same

    def take(self) -> Counter[str]:
        totals, self.totals = self.totals, Counter()
        return totals


def instrument(runner) -> PhaseTimer:
    """Wrap the pieces of one iteration that the phases are made of."""
    timer = PhaseTimer(runner.env.device)
    timer.wrap(runner, "collect", "rollout")  # the rollout and its NaN/Inf check
    timer.wrap(runner, "learn_step", "learn")
    timer.wrap(runner.policy, "act", "act")
    timer.wrap(runner.policy, "value", "value")
    timer.wrap(runner.env, "step", "step")
    timer.wrap(runner.ppo, "gradient", "gradient")
    timer.wrap(runner.ppo, "backward", "backward")
    timer.wrap(runner.ppo, "apply", "apply")
    return timer


def gemm_phase(path: str) -> str:
    """The phase a Linear call belongs to, from the timer path it ran under."""
    if path.startswith("rollout"):
        return "rollout_policy"
    if "gradient" in path:
        return "forward"
    return "other"


def phase_times(totals: Counter[str], t_iter: float) -> dict[str, float]:
    """Seconds per phase of one iteration from the timer paths; they add up to ``t_iter``."""
    p = dict.fromkeys(PHASES, 0.0)
    p["rollout_policy"] = totals["rollout/act"] + totals["rollout/value"]
    p["env_step"] = totals["rollout/step"]
    p["rollout_storage"] = totals["rollout"] - p["rollout_policy"] - p["env_step"]
    p["backward"] = totals["learn/gradient/backward"]
    p["forward"] = totals["learn/gradient"] - p["backward"]
    p["optimizer"] = totals["learn/apply"]
    p["other"] = t_iter - sum(p.values())
    return p


# ---- one iteration, as the runner's loop runs it -----------------------------------------------
def iteration(runner, timer: PhaseTimer) -> float:
    """One training iteration as ``distrl train`` runs it (``Runner.iterate``); its wall time."""
    timer.sync()
    t0 = time.perf_counter()
    runner.iterate()
    timer.sync()
    return time.perf_counter() - t0


def time_round(runner, timer: PhaseTimer, iterations: int) -> dict[str, float]:
    """Mean seconds per phase over ``iterations`` iterations, and ``total``; one untimed
    iteration first (the GEMM timing before it left other data in the caches)."""
    iteration(runner, timer)
    timer.take()
    total = sum(iteration(runner, timer) for _ in range(iterations))
    per_it = total / iterations
    totals = Counter({k: v / iterations for k, v in timer.take().items()})
    return {**phase_times(totals, per_it), "total": per_it}


# ---- the iteration's GEMMs ---------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Gemm:
    """out[M, N] = A[M, K] @ B[K, N]; ``kind`` says which product of a Linear layer it is."""

    kind: str  # "fwd" (x @ W^T, addmm), "dgrad" (g @ W), "wgrad" (g^T @ x)
    M: int
    K: int
    N: int

    @property
    def flops(self) -> int:
        return 2 * self.M * self.K * self.N


def trace_gemms(runner, timer: PhaseTimer) -> tuple[Counter, dict]:
    """Run one (warm-up) iteration with a hook on every nn.Linear of the policy; returns
    {(phase, Gemm): calls per iteration} and {(phase, Gemm): layer names}."""
    calls: Counter[tuple[str, Gemm]] = Counter()
    layers: dict[tuple[str, Gemm], set[str]] = {}

    def add(phase: str, g: Gemm, layer: str) -> None:
        calls[phase, g] += 1
        layers.setdefault((phase, g), set()).add(layer)

    def hook(name: str) -> Callable:
        def record(mod: nn.Linear, args: tuple, _out: torch.Tensor) -> None:
            x = args[0]
            m, k, n = x.numel() // x.shape[-1], mod.in_features, mod.out_features
            add(gemm_phase(timer.path), Gemm("fwd", m, k, n), name)
            if torch.is_grad_enabled() and mod.weight.requires_grad:
                add("backward", Gemm("wgrad", n, m, k), name)
                if x.requires_grad:
                    add("backward", Gemm("dgrad", m, n, k), name)

        return record

    handles = [
        mod.register_forward_hook(hook(name))
        for name, mod in runner.policy.named_modules()
        if isinstance(mod, nn.Linear)
    ]
    try:
        iteration(runner, timer)
    finally:
        for h in handles:
            h.remove()
    timer.take()
    return calls, layers


def gemm_calls(g: Gemm, device: torch.device) -> list[Callable[[], Any]]:
    """Calls of ``g`` into a preallocated output, in each layout the update may use: one for
    ``fwd`` and ``dgrad``; for ``wgrad`` both g.t() @ x (autograd's nn.Linear) and (x.t() @ g).t()
    (LinearTanh's backward), since BLAS speed differs between them by up to 12x."""
    z: dict[str, Any] = dict(device=device)
    out = torch.empty(g.M, g.N, **z)
    if g.kind == "fwd":  # nn.Linear / LinearTanh: addmm(bias, x, W.t())
        bias, x, w = torch.randn(g.N, **z), torch.randn(g.M, g.K, **z), torch.randn(g.N, g.K, **z)
        return [lambda: torch.addmm(bias, x, w.t(), out=out)]
    if g.kind == "wgrad":  # g [batch K, M], x [batch K, N]
        grad, x = torch.randn(g.K, g.M, **z), torch.randn(g.K, g.N, **z)
        out_t = torch.empty(g.N, g.M, **z)
        return [
            lambda: torch.mm(grad.t(), x, out=out),
            lambda: torch.mm(x.t(), grad, out=out_t),
        ]
    a, b = torch.randn(g.M, g.K, **z), torch.randn(g.K, g.N, **z)  # dgrad: g @ W, contiguous
    return [lambda: torch.mm(a, b, out=out)]


def time_gemm(g: Gemm, device: torch.device, reps: int) -> list[float]:
    """Per-call seconds of ``reps`` timed loops in the fastest of ``g``'s layouts."""
    runs = [time_call(call, device, reps) for call in gemm_calls(g, device)]
    return min(runs, key=statistics.median)


def time_call(call: Callable[[], Any], device: torch.device, reps: int) -> list[float]:
    """Per-call seconds of ``reps`` timed loops (each ~2 ms long), after a warm-up."""
    target_s, sync = 2e-3, device_sync(device)
    for _ in range(3):
        call()
    sync()
    t0 = time.perf_counter()
    call()
    sync()
    inner = max(1, min(100_000, math.ceil(target_s / max(time.perf_counter() - t0, 1e-7))))
    for _ in range(inner):  # warm-up at the loop's own length (caches, frequency)
        call()
    out = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            call()
        sync()
        out.append((time.perf_counter() - t0) / inner)
    return out


# ---- the env alone ---------------------------------------------------------------------------
def env_stepper(env, num_steps: int, seed: int) -> Callable[[], float]:
    """Each call times ``num_steps`` steps of ``env`` (a second env of the configured size, not
    the runner's) on random actions, drawn before the clock starts."""
    device, N, space = env.device, env.num_envs, env.action_space
    env.reset(seed=seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    sync = device_sync(device)

    def run() -> float:
        if space.discrete:
            acts = torch.randint(space.n, (num_steps, N), generator=gen, device=device)
        else:
            low = torch.tensor(space.low, device=device)
            high = torch.tensor(space.high, device=device)
            u = torch.rand(num_steps, N, len(space.low), generator=gen, device=device)
            acts = low + (high - low) * u
        sync()
        t0 = time.perf_counter()
        for t in range(num_steps):
            env.step(acts[t])
        sync()
        return time.perf_counter() - t0

    return run


# ---- the command -------------------------------------------------------------------------------
def roofline(a: RooflineArgs) -> dict[str, list[dict]]:
    from distrl.distributed import context
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import make_env
    from distrl.runner.on_policy import OnPolicyRunner

    if a.iterations < 1 or a.repeats < 1 or a.gemm_reps < 1:
        raise ValueError("--iterations, --repeats and --gemm-reps must be at least 1")
    m = common.header("distrl bench roofline")
    cfg = train_config(a)
    out = common.out_dir(a.out, "roofline")
    ctx = context.init(cfg)
    env, probe = make_env(cfg, ctx.device), make_env(cfg, ctx.device)
    try:
        runner = OnPolicyRunner(cfg, make_strategy(cfg, ctx), env)
        timer = instrument(runner)
        calls, layers = trace_gemms(runner, timer)  # also the warm-up iteration
        shapes = sorted({g for _, g in calls} | {Gemm(*REFERENCE)})
        step_env = env_stepper(probe, cfg.agent.num_steps, cfg.seed + 1)
        step_env()  # warm-up
        per_call: dict[Gemm, list[float]] = {g: [] for g in shapes}
        env_times: list[float] = []
        rounds: list[dict[str, float]] = []
        for _ in range(a.repeats):
            for g in shapes:
                per_call[g] += time_gemm(g, ctx.device, a.gemm_reps)
            env_times += [step_env() for _ in range(3)]
            rounds.append(time_round(runner, timer, a.iterations))
    finally:
        env.close()
        probe.close()

    t_call = {g: statistics.median(ts) for g, ts in per_call.items()}
    rate = {g: g.flops / t / 1e9 for g, t in t_call.items()}
    peak = max(rate[g] for _, g in calls)
    cols = config_columns(cfg, a, m)
    gemm_rows = gemm_table(calls, layers, t_call, rate, peak, cols)
    measured = sorted(rounds, key=lambda r: r["total"])[(len(rounds) - 1) // 2]
    phase_rows = phase_table(
        calls, t_call, peak, statistics.median(env_times), measured, rounds, cfg, cols
    )
    phase_rows[-1] |= {"reference_gflops": rate[Gemm(*REFERENCE)]}
    report(phase_rows, gemm_rows, cfg, a, out)
    return {"phases": phase_rows, "gemms": gemm_rows}


def gemm_table(calls, layers, t_call, rate, peak: float, cols: dict) -> list[dict]:
    """One row per (phase, GEMM): calls per iteration, per-call time, GFLOP/s; then the
    reference GEMM (no calls: context only)."""

    def row(phase: str, g: Gemm, n: int, names: set[str]) -> dict:
        return {
            "phase": phase,
            "kind": g.kind,
            "M": g.M,
            "K": g.K,
            "N": g.N,
            "layers": " ".join(sorted(names)),
            "calls_per_iteration": n,
            "mflop_per_call": g.flops / 1e6,
            "us_per_call": t_call[g] * 1e6,
            "gflops": rate[g],
            "of_peak": rate[g] / peak,
            "ms_per_iteration": n * t_call[g] * 1e3,
            **cols,
        }

    order = list(PHASES)
    keys = sorted(calls, key=lambda pg: (order.index(pg[0]), pg[1]))
    return [row(p, g, calls[p, g], layers[p, g]) for p, g in keys] + [
        row("reference", Gemm(*REFERENCE), 0, set())
    ]


def phase_table(calls, t_call, peak, t_env, measured, rounds, cfg, cols: dict) -> list[dict]:
    """One row per phase (measured, machine-limit bound, shape-aware bound, fractions) and a
    last row for the whole iteration with env-steps/s measured and at the bounds."""
    bound = dict.fromkeys(PHASES, 0.0)
    shape_bound = dict.fromkeys(PHASES, 0.0)
    for (phase, g), n in calls.items():
        bound[phase] += n * g.flops / (peak * 1e9)
        shape_bound[phase] += n * t_call[g]
    bound["env_step"] = shape_bound["env_step"] = t_env
    rows = [
        phase_row(k, PHASES[k], BOUND_KIND[k], measured[k], bound[k], shape_bound[k], cols)
        for k in PHASES
    ]
    total = phase_row(
        "iteration",
        "whole iteration",
        "sum",
        measured["total"],
        sum(bound.values()),
        sum(shape_bound.values()),
        cols,
    )
    steps = cfg.batch_size
    total |= {
        "sps_measured": steps / measured["total"],
        "sps_bound": steps / total["bound_s"],
        "sps_shape_bound": steps / total["shape_bound_s"],
        "peak_gflops": peak,
        "gemm_flops_per_iteration": sum(n * g.flops for (_, g), n in calls.items()),
        "iteration_ms_rounds": " ".join(f"{r['total'] * 1e3:.1f}" for r in rounds),
    }
    return [*rows, total]


def phase_row(key, label, kind, t, b, sb, cols: dict) -> dict:
    return {
        "phase": key,
        "label": label,
        "bound_kind": kind,
        "measured_s": t,
        "bound_s": b,
        "shape_bound_s": sb,
        "fraction": b / t if b > 0 and t > 0 else None,
        "shape_fraction": sb / t if sb > 0 and t > 0 else None,
        **cols,
    }


def report(phase_rows: list[dict], gemm_rows: list[dict], cfg, a: RooflineArgs, out: Path):
    from benchmarks import plots

    common.write_csv(out / "roofline.csv", phase_rows)
    common.write_csv(out / "roofline_gemms.csv", gemm_rows)
    it = phase_rows[-1]
    ag = cfg.agent
    setup = (
        f"{cfg.task}: {cfg.env.num_envs} envs x {ag.num_steps} steps, {ag.num_epochs} epochs x "
        f"{ag.num_minibatches} minibatches of {cfg.minibatch_size}, actor "
        f"{list(cfg.policy.actor_hidden)}, critic {list(cfg.policy.critic_hidden)}, "
        f"{a.threads} thread(s)"
    )
    common.show(
        f"GEMMs of one iteration ({setup})",
        gemm_rows,
        [
            ("phase", "phase"),
            ("kind", "kind"),
            ("M", "M"),
            ("K", "K"),
            ("N", "N"),
            ("layers", "layers"),
            ("calls/it", "calls_per_iteration"),
            ("µs/call", "us_per_call"),
            ("GFLOP/s", "gflops"),
            ("of peak", "of_peak"),
            ("ms/it", "ms_per_iteration"),
        ],
    )
    common.show(
        f"roofline per phase, ms per iteration (median of {a.repeats} round(s) x "
        f"{a.iterations} iterations; {a.threads} thread(s))",
        phase_rows,
        [
            ("phase", "label"),
            ("measured ms", "measured_s", 1e3),
            ("bound ms", "bound_s", 1e3),
            ("shape-aware bound ms", "shape_bound_s", 1e3),
            ("bound/measured", "fraction"),
            ("shape-aware/measured", "shape_fraction"),
            ("bound is", "bound_kind"),
        ],
    )
    common.console.print(
        f"peak {it['peak_gflops']:.1f} GFLOP/s (best of the iteration's shapes; a 512³ GEMM: "
        f"{it['reference_gflops']:.1f}) at {a.threads} thread(s) | fraction of roofline "
        f"{it['fraction']:.3f} (shape-aware {it['shape_fraction']:.3f}) | env-steps/s measured "
        f"{it['sps_measured']:,.0f}, at the bound {it['sps_bound']:,.0f} (shape-aware "
        f"{it['sps_shape_bound']:,.0f})"
    )
    plots.roofline(phase_rows, gemm_rows, out / "roofline.png", f"roofline: {setup}")
    for name in ("roofline.csv", "roofline_gemms.csv", "roofline.png"):
        common.console.print(f"wrote {out / name}")
