"""`distrl bench project`: iteration time, FPS, speedup and efficiency projected to large W.

Model (weak scaling: per-rank work E*T constant, so rollout and learn times do not change):

    t_iter(W) = t_rollout + t_learn + t_other + t_comm(W)
    t_comm(W) = n_coll * ring(W, n_bytes) + n_small * ring(W, small_bytes)
    ring(W, n) = 2(W-1)*alpha + 2(W-1)/W * n * beta          (ring all-reduce; 0 for W = 1)
    FPS(W) = W*E*T / t_iter(W),  S(W) = FPS(W) / FPS(1),  E(W) = S(W) / W

``n_coll`` = epochs x minibatches gradient all-reduces of ``n_bytes`` (the flat gradient buffer
plus its scalars), ``n_small`` the few tiny collectives per iteration (advantage statistics,
normalizer moments, episode statistics). ``alpha`` is the per-step latency and ``1/beta`` the
per-link bandwidth of the ring. The inputs come from a `bench scaling` summary (the W=1 row) and
a `bench comm` fit, or from flags (a cluster's published figures).
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from benchmarks import common

SMALL_BYTES = 1024  # size assumed for each small per-iteration collective (a few hundred floats)


@dataclass(frozen=True)
class ProjectArgs:
    world_sizes: str = "1,2,4,8,16,32,64,128,256"
    """World sizes to project, comma-separated."""
    from_scaling: str | None = None
    """A `bench scaling` output dir (or its summary.csv): W=1 times, batch, K, M, bytes."""
    from_comm: str | None = None
    """A `bench comm` output dir (or its fit.csv): per-link alpha and beta of the ring."""
    alpha: float | None = None
    """Per-step ring latency in seconds (overrides --from-comm)."""
    beta: float | None = None
    """Per-link seconds per byte (overrides --from-comm)."""
    latency_us: float | None = None
    """Per-step latency in microseconds (a cluster's figure; overrides --alpha)."""
    bandwidth_gbps: float | None = None
    """Per-link bandwidth in GB/s (1e9 bytes/s; overrides --beta)."""
    t_rollout: float | None = None
    """Rollout seconds per iteration per rank (overrides the scaling summary)."""
    t_learn: float | None = None
    """Learn (compute) seconds per iteration per rank (overrides the scaling summary)."""
    t_other: float | None = None
    """Other seconds per iteration: GAE, checks, bookkeeping (overrides; default 0 w/o summary)."""
    steps_per_rank: int | None = None
    """Env steps per rank per iteration, E*T (overrides the scaling summary)."""
    epochs: int | None = None
    """PPO epochs K (overrides the scaling summary)."""
    minibatches: int | None = None
    """Minibatches per epoch M (overrides the scaling summary)."""
    grad_bytes: int | None = None
    """Bytes of one gradient all-reduce (overrides the scaling summary)."""
    small_collectives: int = 3
    """Tiny collectives per iteration besides the gradient all-reduces (latency-bound)."""
    out: str | None = None
    """Results directory (default bench_out/project)."""


# ---- the model (pure arithmetic; tested with hand-computed numbers) -------------------------
def ring_allreduce_time(world: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Ring all-reduce: reduce-scatter + all-gather, 2(W-1) steps of n/W bytes each."""
    if world <= 1:
        return 0.0
    return 2 * (world - 1) * alpha + 2 * (world - 1) / world * n_bytes * beta


def ring_link_params(alpha_fit: float, beta_fit: float, world: int) -> tuple[float, float]:
    """Per-step (alpha, beta) of the ring from a fit t(n) = alpha_fit + beta_fit*n measured at
    ``world`` ranks: alpha_fit = 2(W-1)*alpha, beta_fit = 2(W-1)/W * beta."""
    if world < 2:
        raise ValueError("a fit at one rank has no communication; measure with W >= 2")
    return alpha_fit / (2 * (world - 1)), beta_fit * world / (2 * (world - 1))


@dataclass(frozen=True)
class ModelInputs:
    t_rollout: float
    t_learn: float
    t_other: float
    steps_per_rank: int
    epochs: int
    minibatches: int
    grad_bytes: int
    alpha: float
    beta: float
    small_collectives: int = 3
    small_bytes: int = SMALL_BYTES


def project_row(p: ModelInputs, world: int, fps1: float | None = None) -> dict:
    n_coll = p.epochs * p.minibatches
    t_comm = n_coll * ring_allreduce_time(world, p.grad_bytes, p.alpha, p.beta)
    t_comm += p.small_collectives * ring_allreduce_time(world, p.small_bytes, p.alpha, p.beta)
    t_iter = p.t_rollout + p.t_learn + p.t_other + t_comm
    fps = world * p.steps_per_rank / t_iter
    fps1 = fps1 if fps1 is not None else p.steps_per_rank / (p.t_rollout + p.t_learn + p.t_other)
    speedup = fps / fps1
    return {
        "W": world,
        "t_rollout": p.t_rollout,
        "t_learn": p.t_learn,
        "t_other": p.t_other,
        "t_comm": t_comm,
        "t_iter": t_iter,
        "fps": fps,
        "speedup": speedup,
        "efficiency": speedup / world,
        "rho_comm": t_comm / t_iter,
        "n_collectives": n_coll,
    }


def project(p: ModelInputs, worlds: list[int]) -> list[dict]:
    return [project_row(p, w) for w in worlds]


def grad_buffer_bytes(cfg) -> int:
    """Bytes of the flat buffer PPO all-reduces per minibatch: float32 gradients + 6 scalars."""
    from distrl.envs.registry import make_env
    from distrl.policy import ActorCritic

    env = make_env(dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, num_envs=1)), "cpu")
    try:
        policy = ActorCritic.for_env(env, cfg.policy)
    finally:
        env.close()
    n = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    return 4 * (n + 6)


# ---- inputs ---------------------------------------------------------------------------------
def _read_csv(path: str, name: str) -> list[dict]:
    p = Path(path)
    if p.is_dir():
        p = p / name
    if not p.exists():
        raise ValueError(f"{p} does not exist")
    with p.open(newline="") as f:
        return list(csv.DictReader(f))


def _f(v: str | None) -> float | None:
    return None if v in (None, "") else float(v)


_OVERRIDES = (
    "t_rollout",
    "t_learn",
    "t_other",
    "steps_per_rank",
    "epochs",
    "minibatches",
    "grad_bytes",
)
"""Model inputs a flag may set directly, over what the scaling summary says."""


def resolve(a: ProjectArgs) -> tuple[ModelInputs, list[dict], list[str]]:
    """Model inputs, the measured summary rows (for validation) and where each input came from."""
    notes: list[str] = []
    summary: list[dict] = []
    base: dict = {}
    if a.from_scaling:
        summary = _read_csv(a.from_scaling, "summary.csv")
        base = _inputs_from_scaling(a.from_scaling, summary, notes)
    alpha, beta = _link_params(a, notes)
    for k in _OVERRIDES:
        v = getattr(a, k)
        if v is not None:
            base[k] = v
            notes.append(f"{k} = {v} from the command line")
    base.setdefault("t_other", 0.0)
    alpha, beta = _require_inputs(base, alpha, beta)
    p = ModelInputs(alpha=alpha, beta=beta, small_collectives=a.small_collectives, **base)
    return p, summary, notes


def _inputs_from_scaling(source: str, summary: list[dict], notes: list[str]) -> dict:
    """Per-rank times, batch, K, M and gradient bytes from the W=1 row of a scaling summary."""
    row1 = next((r for r in summary if int(r["W"]) == 1), None)
    if row1 is None:
        raise ValueError(f"{source}: no W=1 row to take per-rank times from")

    def optional_int(key: str) -> int | None:
        return int(row1[key]) if row1.get(key) else None

    notes.append(
        f"per-rank times, batch, K, M and gradient bytes from the W=1 row of {source}"
        f" ({row1.get('task', '?')}, measured on {row1.get('cpu', '?')})"
    )
    return {
        "t_rollout": _f(row1["t_rollout"]),
        "t_learn": _f(row1["t_learn"]),
        "t_other": _f(row1.get("t_other")) or 0.0,
        "steps_per_rank": int(row1["rollout_steps"]) * int(row1["num_envs_per_rank"]),
        "epochs": optional_int("epochs"),
        "minibatches": optional_int("minibatches"),
        "grad_bytes": optional_int("grad_bytes"),
    }


def _link_params(a: ProjectArgs, notes: list[str]) -> tuple[float | None, float | None]:
    """Per-step ring (alpha, beta): a `bench comm` fit, then the flags over it in turn."""
    alpha = beta = None
    if a.from_comm:
        fit = _read_csv(a.from_comm, "fit.csv")[0]
        alpha, beta = float(fit["alpha_link_s"]), float(fit["beta_link_s_per_byte"])
        notes.append(
            f"alpha, beta from {a.from_comm}: fit t(n) = {float(fit['alpha_s']) * 1e6:.1f} us + n"
            f" / {float(fit['bandwidth_gbps']):.3f} GB/s at W={fit['W']} ({fit['backend']}), "
            f"converted to per-step ring figures (alpha_fit = 2(W-1) alpha, beta_fit = 2(W-1)/W "
            f"beta)"
        )
    if a.alpha is not None:
        alpha = a.alpha
    if a.beta is not None:
        beta = a.beta
    if a.latency_us is not None:
        alpha = a.latency_us * 1e-6
    if a.bandwidth_gbps is not None:
        beta = 1.0 / (a.bandwidth_gbps * 1e9)
    if a.from_comm is None and (alpha is not None or beta is not None):
        notes.append("alpha/beta given on the command line")
    return alpha, beta


def _require_inputs(base: dict, alpha: float | None, beta: float | None) -> tuple[float, float]:
    """``alpha`` and ``beta``, once every input is there; raises naming what is missing."""
    missing = [k for k in _OVERRIDES if base.get(k) is None]
    if alpha is None:
        missing.append("alpha (--from-comm, --alpha or --latency-us)")
    if beta is None:
        missing.append("beta (--from-comm, --beta or --bandwidth-gbps)")
    if missing or alpha is None or beta is None:  # alpha or beta None is in missing too
        raise ValueError("missing model inputs: " + ", ".join(missing))
    return alpha, beta


def validate_rows(p: ModelInputs, summary: list[dict]) -> list[dict]:
    """Predicted vs measured t_iter for the measured rows with the W=1 row's per-rank work."""
    rows = []
    for r in summary:
        w = int(r["W"])
        if int(r["rollout_steps"]) * int(r["num_envs_per_rank"]) != p.steps_per_rank:
            continue  # strong-scaling rows have other per-rank work: not this model's case
        pred = project_row(p, w)
        meas = float(r["t_iter"])
        rows.append(
            {
                "W": w,
                "t_iter_measured": meas,
                "t_iter_predicted": pred["t_iter"],
                "rel_error": (pred["t_iter"] - meas) / meas,
                "t_comm_measured": _f(r.get("t_comm")),
                "t_comm_predicted": pred["t_comm"],
                "fps": float(r["fps_mean"]),
                "note": r.get("note", ""),
            }
        )
    return rows


def assumptions(p: ModelInputs, notes: list[str]) -> list[str]:
    return [
        "t_iter(W) = t_rollout + t_learn + t_other + t_comm(W)",
        "t_comm(W) = n_coll * ring(W, n_bytes) + n_small * ring(W, small_bytes)",
        "ring(W, n) = 2(W-1)*alpha + 2(W-1)/W * n * beta   (ring all-reduce, 0 at W=1)",
        "FPS(W) = W*E*T / t_iter(W);  S(W) = FPS(W)/FPS(1);  E(W) = S(W)/W",
        "weak scaling: each rank keeps E*T env steps per iteration, so t_rollout and t_learn "
        "stay at their W=1 values (one core or device per rank, no shared-resource slowdown)",
        "no straggler wait (t_sync = 0): every rank is as fast as the measured W=1 process",
        "collectives are not overlapped with compute; one flat gradient all-reduce per minibatch",
        f"t_rollout = {p.t_rollout * 1e3:.3f} ms, t_learn = {p.t_learn * 1e3:.3f} ms, "
        f"t_other = {p.t_other * 1e3:.3f} ms, E*T = {p.steps_per_rank}",
        f"n_coll = K*M = {p.epochs}*{p.minibatches} = {p.epochs * p.minibatches} all-reduces of "
        f"n_bytes = {p.grad_bytes:,} B; n_small = {p.small_collectives} of {p.small_bytes} B",
        f"alpha = {p.alpha * 1e6:.3f} us per step, beta = {p.beta:.4g} s/B "
        f"(link bandwidth {1e-9 / p.beta if p.beta else float('inf'):.3f} GB/s)",
        *notes,
    ]


def project_cmd(a: ProjectArgs) -> list[dict]:
    common.header("distrl bench project")
    out = common.out_dir(a.out, "project")
    p, summary, notes = resolve(a)
    rows = project(p, common.parse_ints(a.world_sizes))
    lines = assumptions(p, notes)
    (out / "assumptions.txt").write_text("\n".join(lines) + "\n")
    common.console.print("assumptions:\n  " + "\n  ".join(lines))
    common.write_csv(out / "projection.csv", rows)
    show_projection(rows)
    val = validate_rows(p, summary)
    if val:
        common.write_csv(out / "validation.csv", val)
        show_validation(val)
    elif summary:
        common.console.print(
            "no measured row has the W=1 row's per-rank work (a strong-scaling summary?); "
            "validation needs `bench scaling --mode weak`"
        )
    plot(p, rows, val, out)
    written = ["projection.csv", "projection.png", "assumptions.txt"]
    written += ["validation.csv"] if val else []
    common.console.print(f"wrote {', '.join(str(out / w) for w in written)}")
    return rows


def show_projection(rows: list[dict]) -> None:
    common.show(
        "projected weak scaling",
        rows,
        [
            ("W", "W"),
            ("t_iter ms", "t_iter", 1e3),
            ("t_comm ms", "t_comm", 1e3),
            ("ρ_comm", "rho_comm"),
            ("FPS", "fps"),
            ("S(W)", "speedup"),
            ("E(W)", "efficiency"),
        ],
    )


def show_validation(val: list[dict]) -> None:
    common.show(
        "model vs measured (scaling summary)",
        val,
        [
            ("W", "W"),
            ("t_iter meas ms", "t_iter_measured", 1e3),
            ("t_iter model ms", "t_iter_predicted", 1e3),
            ("rel error", "rel_error"),
            ("t_comm meas ms", "t_comm_measured", 1e3),
            ("t_comm model ms", "t_comm_predicted", 1e3),
            ("note", "note"),
        ],
    )


def plot(p: ModelInputs, rows: list[dict], val: list[dict], out: Path) -> None:
    from benchmarks import plots

    plots.projection(
        rows,
        val,
        out / "projection.png",
        f"projected weak scaling (E*T={p.steps_per_rank}, K*M="
        f"{p.epochs * p.minibatches}, {p.grad_bytes:,} B)",
    )
