"""`distrl average RUN`: the mean of a run's policy weights over its last checkpoints
(stochastic weight averaging, Izmailov et al. 2018, "Averaging Weights Leads to Wider Optima and
Better Generalization"), written as a policy-only checkpoint for `distrl play`, `distrl export`
and `train --init-from`.

Late in a run, successive checkpoints of the same policy sit around one solution and differ
mostly by the noise of their last updates; their mean can be a better policy than the last of
them (MT10 fine-tuning: on 4 of 5 seeds, +0.008 on the mean; nothing while a run still improves:
docs/journal.md). The averaged file is judged like any other: score it with `distrl play`.

Every floating-point entry of the policy's state is averaged (in float64, then cast back)
except the observation normalizer's, which are taken from the newest checkpoint: the
statistics the weights were trained against change slowly late in a run (and not at all with
``--init-normalizer frozen``), and how far they moved over the window is reported, in units of
the newest standard deviation. Other entries (integers) must be equal in every checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

from distrl import checkpoint as ckpt

NORMALIZER = "normalizer."
DEFAULT_FRACTION = 2 / 3


@dataclass(frozen=True)
class AverageArgs:
    paths: tyro.conf.Positional[tuple[str, ...]]
    """A run directory (its ckpt_*.pt files from --from-iteration to --to-iteration), or two or
    more checkpoint files of one run."""
    from_iteration: int | None = None
    """Run directory: the first iteration to include (default: the first checkpoint at or after
    two thirds of the newest's iteration, e.g. 600 of 900; the newest two where that window
    holds fewer)."""
    to_iteration: int | None = None
    """Run directory: the last iteration to include (default: the newest checkpoint's)."""
    output: str | None = None
    """File to write (default: avg_<first>-<last>.pt beside the newest checkpoint averaged)."""


@dataclass(frozen=True)
class AverageResult:
    path: Path
    """The averaged checkpoint (policy only)."""
    iterations: tuple[int, ...]
    """The iterations of the checkpoints averaged, oldest first."""
    weight_spread: float
    """Largest |entry of one checkpoint - the same entry of the average| over the averaged
    entries: how far apart the checkpoints were."""
    normalizer_drift: float | None
    """Largest |mean_k - mean_newest| * inv_std_newest over checkpoints k and observation
    dimensions (0 for a frozen normalizer); None when the policy has no normalizer."""


def select(
    run_dir: Path, from_iteration: int | None = None, to_iteration: int | None = None
) -> list[Path]:
    """The run's ``ckpt_*.pt`` files with iterations in [from, to], oldest first; without a
    window, those of the last third of the run, or the newest two where it holds fewer (a run
    saved every 50 of 100 iterations: 50 and 100)."""
    run_dir = Path(run_dir)
    ckdir = run_dir / "checkpoints" if (run_dir / "checkpoints").is_dir() else run_dir
    found = sorted(ckpt.list_checkpoints(ckdir), key=lambda p: ckpt.checkpoint_iteration(p) or 0)
    if not found:
        raise ValueError(
            f"{run_dir}: no {ckpt.CHECKPOINT_GLOB} files to average (expected a run directory "
            f"or its checkpoints/)"
        )
    if from_iteration is not None and from_iteration < 0:
        raise ValueError(f"--from-iteration must be >= 0, got {from_iteration}")
    iterations = [ckpt.checkpoint_iteration(p) or 0 for p in found]
    newest = iterations[-1]
    last = newest if to_iteration is None else to_iteration
    first = int(newest * DEFAULT_FRACTION) if from_iteration is None else from_iteration
    if first > last:
        raise ValueError(f"--from-iteration {first} is after --to-iteration {last}")
    chosen = [p for p, it in zip(found, iterations, strict=True) if first <= it <= last]
    if len(chosen) < 2 and from_iteration is None and to_iteration is None and len(found) >= 2:
        return found[-2:]  # the default window is too narrow for the run's save interval
    if len(chosen) < 2:
        raise ValueError(
            f"{run_dir}: {len(chosen)} checkpoint(s) in iterations {first}..{last} (the run has "
            f"{', '.join(map(str, iterations))}); averaging needs at least 2: widen the window "
            f"with --from-iteration / --to-iteration, or save more often (--agent.save-interval)"
        )
    return chosen


def average_checkpoints(paths: list[Path], output: Path | None = None) -> AverageResult:
    """Average the policies of ``paths`` (one run's checkpoints) into ``output``; the newest
    (highest iteration) gives the normalizer, iteration, env steps and config."""
    if len(paths) < 2:
        raise ValueError(f"averaging needs at least 2 checkpoints, got {len(paths)}")
    if len({Path(p).resolve() for p in paths}) != len(paths):
        raise ValueError("the same checkpoint is named twice; name each one once")
    if output is not None:
        ckpt.check_policy_file_name(Path(output), "--output")
    loaded = [ckpt.load_checkpoint(Path(p)) for p in paths]
    order = sorted(range(len(paths)), key=lambda i: int(loaded[i][0]["iteration"]))
    paths = [Path(paths[i]) for i in order]
    states = [loaded[i][0] for i in order]
    manifests = [loaded[i][1] for i in order]
    newest, newest_manifest = states[-1], manifests[-1]
    _check_same_policy(paths, manifests, states)

    policies = [s["policy"] for s in states]
    averaged: dict[str, torch.Tensor] = {}
    spread = 0.0
    for key, value in policies[-1].items():
        if key.startswith(NORMALIZER):
            averaged[key] = value
        elif value.is_floating_point():
            stack = torch.stack([p[key].double() for p in policies])
            mean = stack.mean(0)
            if stack.numel():
                spread = max(spread, float((stack - mean).abs().max()))
            averaged[key] = mean.to(value.dtype)
        else:
            for path, p in zip(paths, policies, strict=True):
                if not torch.equal(p[key], value):
                    raise ValueError(
                        f"{path}: policy entry {key} differs from the newest checkpoint's and "
                        f"cannot be averaged; average checkpoints of one run"
                    )
            averaged[key] = value

    iterations = tuple(int(s["iteration"]) for s in states)
    if output is None:
        output = paths[-1].parent / f"avg_{iterations[0]}-{iterations[-1]}.pt"
    output = Path(output)
    env_steps = int(newest.get("env_steps", 0))
    state = {"policy": averaged, "iteration": iterations[-1], "env_steps": env_steps}
    state["wall_time"] = float(newest.get("wall_time", 0.0))
    meta = ckpt.run_metadata(newest_manifest["config"], newest_manifest["world_size"], env_steps)
    meta |= {
        "policy_only": True,
        "averaged_iterations": list(iterations),
        "averaged_files": [str(p) for p in paths],
    }
    path = ckpt.save_checkpoint(output.parent, iterations[-1], state, meta, name=output.name)
    return AverageResult(path, iterations, spread, _normalizer_drift(policies))


def _check_same_policy(paths: list[Path], manifests: list[dict], states: list[dict]) -> None:
    newest_path, newest = paths[-1], manifests[-1]["config"]
    layout = {k: tuple(v.shape) for k, v in states[-1]["policy"].items()}
    for path, manifest, state in zip(paths, manifests, states, strict=True):
        cfg = manifest["config"]
        for field in ("task", "policy"):
            if cfg[field] != newest[field]:
                raise ValueError(
                    f"{path}: its {field} ({cfg[field]}) differs from {newest_path}'s "
                    f"({newest[field]}); average checkpoints of one run"
                )
        shapes = {k: tuple(v.shape) for k, v in state["policy"].items()}
        if shapes != layout:
            differ = sorted(set(shapes.items()) ^ set(layout.items()))[0][0]
            raise ValueError(
                f"{path}: policy entry {differ} does not match {newest_path}'s; average "
                f"checkpoints of one run"
            )


def _normalizer_drift(policies: list[dict[str, torch.Tensor]]) -> float | None:
    mean_key, scale_key = NORMALIZER + "mean", NORMALIZER + "inv_std"
    newest = policies[-1]
    if mean_key not in newest or scale_key not in newest:
        return None
    scale = newest[scale_key].double()
    return max(
        float(((p[mean_key].double() - newest[mean_key].double()).abs() * scale).max())
        for p in policies
    )


def describe(result: AverageResult) -> str:
    its = result.iterations
    text = (
        f"averaged {len(its)} checkpoints (iterations {', '.join(map(str, its))}) -> "
        f"{result.path}\n  weights: the checkpoints are within {result.weight_spread:.4g} of "
        f"the average in every entry"
    )
    if result.normalizer_drift == 0:
        text += "\n  normalizer: the same in every checkpoint"
    elif result.normalizer_drift is not None:
        text += (
            f"\n  normalizer: the newest's; over the window the observation means moved by up "
            f"to {result.normalizer_drift:.3g} of its standard deviations"
        )
    return text + f"\n  score it: distrl play {result.path}"


def average(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    from_iteration: int | None = None,
    to_iteration: int | None = None,
    output: str | os.PathLike[str] | None = None,
) -> AverageResult:
    """``distrl.average``: a run directory's window of checkpoints (``select``), or the
    checkpoint files named, averaged into ``output`` (``average_checkpoints``)."""
    named = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    if not named:
        raise ValueError("name a run directory or two or more checkpoint files")
    first = Path(named[0]).expanduser()
    if len(named) == 1:
        if not first.is_dir():
            raise ValueError(
                f"{first}: not a run directory; name a run directory, or two or more "
                f"checkpoint files"
            )
        chosen = select(first, from_iteration, to_iteration)
    else:
        if from_iteration is not None or to_iteration is not None:
            raise ValueError(
                "--from-iteration / --to-iteration select from a run directory; with "
                "checkpoint files named, drop them"
            )
        chosen = [Path(p).expanduser() for p in named]
    out = None if output is None else Path(output).expanduser()
    return average_checkpoints(chosen, out)


__all__ = [
    "AverageArgs",
    "AverageResult",
    "average",
    "average_checkpoints",
    "describe",
    "select",
]
