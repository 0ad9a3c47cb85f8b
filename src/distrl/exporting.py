"""`distrl export RUN --format onnx|torchscript`: the deterministic actor of a checkpoint as a
file a robot, a game engine or a C++ program runs without distrl, as rsl_rl and Isaac Lab export.

What the file computes, for raw observations ``obs`` [batch, obs_dim] float32 (any batch size;
uint8 rows in (C, H, W) order for image policies, whose encoder scales them):

    action = act_deterministic(obs)
           = argmax(actor(normalize(obs)))                  discrete: [batch] int64
           = clip(actor(normalize(obs)), low, high)         continuous: [batch, act_dim] float32

with the observation normalizer's statistics of that checkpoint baked in (frozen), so it is the
action ``distrl play`` takes. A recurrent policy's file takes its memory too and returns the
next: ``(obs, memory [batch, slots, H]) -> (action, memory_out)``; start from zeros and zero a
row where its episode ends, as training did. The critic is left out. Metadata (task, distrl
version, spaces, checkpoint, iteration) goes into the file itself (ONNX ``metadata_props``,
each value JSON; TorchScript extra file ``distrl.json``) and into a ``.json`` beside it.

Every export is checked before it is reported done: the file is loaded back (onnxruntime for
ONNX when installed, ``torch.jit.load`` for TorchScript) and its actions on a batch of
observations are compared with the checkpoint policy's: exact for discrete actions (except
where the checkpoint's two best logits are closer than the tolerance, a tie either may break),
within ``1e-5`` absolute for continuous ones. A file that disagrees is removed and the export
fails.

ONNX goes through torch's TorchScript-based exporter (``dynamo=False``): for these small graphs
it takes 0.2 s where the dynamo exporter took 7.6 s on this machine's CPU, and it needs only the
``onnx`` package, not onnxscript.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import secrets
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import tyro
from torch import nn

from distrl.install import pip_install
from distrl.policy.actor_critic import ActorCritic, LinearTanh
from distrl.safe_files import safe_open

FORMATS = ("onnx", "torchscript")
SUFFIX = {"onnx": ".onnx", "torchscript": ".pt"}
TOLERANCE = 1e-5
PARITY_BATCH = 256


@dataclass(frozen=True)
class ExportArgs:
    path: tyro.conf.Positional[str]
    """A run directory (its newest valid checkpoint is exported) or a checkpoint file."""
    format: Literal["onnx", "torchscript"] = "onnx"
    """onnx (needs the export extra: pip install -c constraints.txt -e '.[export]') or
    torchscript."""
    output: str | None = None
    """File to write (default: RUN/exported/policy.onnx or .pt)."""
    check: bool = True
    """Run the exported file on a batch of observations and compare with the checkpoint."""


class ExportError(ValueError):
    """An export that cannot be made (a bad path, format or output name; onnx missing)."""


class ParityError(ExportError):
    """An exported file whose actions disagree with its checkpoint's (removed, not kept)."""


@dataclass(frozen=True)
class ExportResult:
    path: Path
    """The exported file."""
    metadata: dict[str, Any]
    """What the file's metadata and its ``.json`` sidecar hold."""
    max_abs_diff: float | None
    """Largest |action difference| to the checkpoint in the parity check; None if not run."""
    checked_with: str
    """What ran the exported file in the parity check (``onnxruntime``, ``torch.jit``), or
    why it was not run."""

    @property
    def metadata_path(self) -> Path:
        return sidecar(self.path)


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


class DeterministicActor(nn.Module):
    """``policy.act_deterministic`` alone: a copy of the policy without its critic, with the
    fused ``LinearTanh`` layers (a custom autograd function, and a branch on the batch size)
    turned back into ``nn.Linear`` + ``nn.Tanh``, which compute the same function."""

    def __init__(self, policy: ActorCritic):
        super().__init__()
        self.policy = copy.deepcopy(policy).cpu().eval()
        self.policy.critic = nn.Identity()
        self.policy.reward_norm = None
        _unfuse(self.policy.actor)
        self.policy.requires_grad_(False)

    def forward(
        self, obs: torch.Tensor, memory: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        action, _, new_memory = self.policy.deterministic(obs, memory)
        return action if new_memory is None else (action, new_memory)


def _unfuse(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, LinearTanh):
            plain = nn.Linear(child.in_features, child.out_features)
            plain.load_state_dict(child.state_dict())
            setattr(module, name, nn.Sequential(plain, nn.Tanh()))
        else:
            _unfuse(child)


def metadata(policy: ActorCritic, cfg: Any, manifest: dict, checkpoint: Path, fmt: str) -> dict:
    from distrl import __version__

    space = policy.action_space
    obs_dim = policy.obs_dim
    if space.discrete:
        action = {"type": "discrete", "n": space.n, "shape": ["batch"], "dtype": "int64"}
    elif space.categorical:
        K = len(space.nvec)
        action = {"type": "multi_discrete", "nvec": list(space.nvec), "shape": ["batch", K]}
        action["dtype"] = "int64"
    else:
        action = {
            "type": "box",
            "shape": ["batch", space.dim],
            "dtype": "float32",
            "low": list(space.low),
            "high": list(space.high),
        }
    return {
        "format": "distrl-policy",
        "export_format": fmt,
        "distrl_version": __version__,
        "task": cfg.task,
        "checkpoint": str(checkpoint),
        "iteration": manifest.get("iteration"),
        "env_steps": manifest.get("env_steps"),
        "network": cfg.policy.network,
        "input": {
            "name": "obs",
            "shape": ["batch", obs_dim],
            "dtype": str(policy.obs_dtype).removeprefix("torch."),
        },
        "observation_shape": list(policy.obs_shape),
        "output": {"name": "action", **action},
        "memory": None
        if not policy.recurrent
        else {
            "input": "memory",
            "output": "memory_out",
            "shape": ["batch", *policy.initial_memory(1).shape[1:]],
            "dtype": "float32",
            "reset": "zeros at an episode's first step",
        },
        "observation_normalization": "baked in" if policy.normalizer.enabled else "none",
        "computes": "argmax of the actor's logits"
        + (" for each component" if space.categorical and not space.discrete else "")
        if space.categorical
        else "the actor's mean, clipped to [low, high]"
        if policy.head is None
        else "the actor's mean squashed by tanh into [low, high]",
    }


def default_output(checkpoint: Path, fmt: str) -> Path:
    """``RUN/exported/policy.onnx`` (or ``.pt``) for a checkpoint under ``RUN/checkpoints``;
    beside the checkpoint file otherwise."""
    ckpt_dir = checkpoint.parent
    base = ckpt_dir.parent if ckpt_dir.name == "checkpoints" else ckpt_dir
    stem = "policy" if checkpoint.name.startswith("ckpt_") else f"policy_{checkpoint.stem}"
    return base / "exported" / (stem + SUFFIX[fmt])


def export_policy(
    path: str | os.PathLike[str],
    format: str = "onnx",
    output: str | os.PathLike[str] | None = None,
    *,
    check: bool = True,
) -> ExportResult:
    """Export the deterministic actor of a run directory's newest valid checkpoint (or of a
    checkpoint file) to ``format`` (``onnx`` or ``torchscript``); see the module docstring.
    A network registered with ``register_network`` must be registered in this process too."""
    from distrl.rundir import load, load_policy

    if format not in FORMATS:
        raise ExportError(f"--format {format!r}: choose one of {', '.join(FORMATS)}")
    if format == "onnx" and importlib.util.find_spec("onnx") is None:
        raise ExportError(
            f"ONNX export needs the onnx package: {pip_install('export')} (onnx and "
            "onnxruntime), or export --format torchscript"
        )
    src = Path(path).expanduser()
    if not src.exists():
        raise ExportError(f"{path}: no such run directory or checkpoint file")
    _, _, checkpoint, manifest = load(str(src), torch.device("cpu"))
    policy, cfg = load_policy(checkpoint)
    out = Path(output).expanduser() if output is not None else default_output(checkpoint, format)
    if out.suffix != SUFFIX[format]:
        raise ExportError(f"--output {out}: a {format} file should end in {SUFFIX[format]}")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = metadata(policy, cfg, manifest, checkpoint, format)
    actor = DeterministicActor(policy)
    example = _inputs(policy, 2, seed=0)
    # A name of this writer's own (pid and random digits): two exports never share one
    tmp = out.with_name(f".tmp-{out.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        if format == "onnx":
            _write_onnx(actor, example, tmp, meta)
        else:
            _write_torchscript(actor, example, tmp, meta)
        diff, checked_with = (None, "not checked (check=False)")
        if check:
            diff, checked_with = _parity(policy, tmp, format)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    meta["parity"] = {"max_abs_diff": diff, "checked_with": checked_with, "tolerance": TOLERANCE}
    with safe_open(sidecar(out), "w", encoding="utf-8") as f:  # never through a link
        f.write(json.dumps(meta, indent=2) + "\n")
    return ExportResult(out, meta, diff, checked_with)


def _observations(policy: ActorCritic, n: int, seed: int) -> torch.Tensor:
    """Observations around what the policy saw in training: the normalizer's mean ± 3 std
    (standard normal where it is off), and a few far outside (where the normalizer clips);
    random bytes for image policies (standard normal values' bytes in a Dict row's vectors)."""
    g = torch.Generator().manual_seed(seed)
    if policy.obs_dtype == torch.uint8:
        obs = torch.randint(0, 256, (n, policy.obs_dim), generator=g, dtype=torch.uint8)
        for f in getattr(policy.obs_shape, "fields", ()):  # an ObsLayout's vector parts hold
            if f.kind == "vector":  # float32 values' bytes: standard normal ones, not NaNs
                values = torch.randn(n, f.shape[0], generator=g)
                obs[:, f.offset : f.offset + f.nbytes] = values.view(torch.uint8)
        return obs
    norm = policy.normalizer
    z = torch.randn(n, policy.obs_dim, generator=g)
    z[: max(1, n // 16)] *= 20.0
    if not norm.enabled:
        return z
    return (norm.mean.cpu() + z / norm.inv_std.cpu()).to(torch.float32)


def _inputs(policy: ActorCritic, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """The exported file's inputs for ``n`` rows: observations, and a recurrent policy's memory
    (small random values, as after a few steps)."""
    obs = _observations(policy, n, seed)
    if not policy.recurrent:
        return (obs,)
    g = torch.Generator().manual_seed(seed + 1)
    return obs, 0.5 * torch.randn(policy.initial_memory(n).shape, generator=g)


def _write_onnx(
    actor: DeterministicActor, example: tuple[torch.Tensor, ...], path: Path, meta: dict
) -> None:
    import onnx

    inputs, outputs = ["obs", "memory"][: len(example)], ["action", "memory_out"][: len(example)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notes
        torch.onnx.export(
            actor,
            example,
            str(path),
            dynamo=False,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes={name: {0: "batch"} for name in inputs + outputs},
        )
    model = onnx.load(str(path))
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _write_torchscript(
    actor: DeterministicActor, example: tuple[torch.Tensor, ...], path: Path, meta: dict
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated as of torch 2.13: docs/export.md
        traced = torch.jit.trace(actor, example)
        torch.jit.save(traced, str(path), _extra_files={"distrl.json": json.dumps(meta)})


def _run_exported(
    path: Path, fmt: str, inputs: tuple[torch.Tensor, ...]
) -> tuple[tuple[torch.Tensor, ...], str] | None:
    """The exported file's outputs (action, and memory_out for a recurrent policy)."""
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # see docs/export.md
            module = torch.jit.load(str(path))
        with torch.no_grad():
            out = module(*inputs)
        return (out if isinstance(out, tuple) else (out,)), "torch.jit"
    if importlib.util.find_spec("onnxruntime") is None:
        return None
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = dict(zip(("obs", "memory"), (t.numpy() for t in inputs), strict=False))
    return tuple(torch.from_numpy(a) for a in session.run(None, feed)), "onnxruntime"


def _parity(policy: ActorCritic, path: Path, fmt: str) -> tuple[float | None, str]:
    """Largest |difference| between the exported file's actions (and memory) and the
    checkpoint's, over a batch of ``PARITY_BATCH`` observations and a batch of one; a recurrent
    policy's over 4 steps, each file's memory fed back to it; raises ExportError past the
    tolerance (see the module docstring)."""
    worst = 0.0
    tool = ""
    for n in (PARITY_BATCH, 1):
        inputs = _inputs(policy, n, seed=n)
        memory = inputs[1] if policy.recurrent else None
        for step in range(4 if policy.recurrent else 1):
            obs = inputs[0] if step == 0 else _observations(policy, n, seed=n + 100 * step)
            ran = _run_exported(path, fmt, (obs,) if memory is None else (obs, memory))
            if ran is None:
                return None, f"not checked: onnxruntime is not installed ({pip_install('export')})"
            outputs, tool = ran
            with torch.no_grad():
                ours, logits, ours_memory = policy.deterministic(obs, memory)
            worst = max(worst, _compare(policy, outputs[0], ours, logits, tool, n))
            if memory is not None and ours_memory is not None:
                diff = float((outputs[1] - ours_memory).abs().max())
                worst = max(worst, diff)
                if diff > TOLERANCE:
                    raise ParityError(
                        f"export check: {tool}'s memory differs from the checkpoint's by up to "
                        f"{diff:.3g} at step {step} (tolerance {TOLERANCE:g})"
                    )
                memory = outputs[1]  # the file's own memory, as a user would feed it back
    return worst, tool


def _compare(
    policy: ActorCritic,
    theirs: torch.Tensor,
    ours: torch.Tensor,
    logits: torch.Tensor,
    tool: str,
    n: int,
) -> float:
    """The actions' largest |difference| (0 for discrete); raises ParityError past the
    tolerance, or for a discrete action (a multi-discrete action's component) that differs
    where the checkpoint's two best logits (of that component) are not tied."""
    if theirs.shape != ours.shape or theirs.dtype != ours.dtype:
        raise ParityError(
            f"export check: {tool} returned {theirs.dtype} {tuple(theirs.shape)}, the "
            f"checkpoint policy {ours.dtype} {tuple(ours.shape)}"
        )
    if policy.categorical:
        wrong = (theirs != ours).view(n, -1)
        sizes = policy.action_space.sizes  # one or several choices' logits
        for k, part in enumerate(logits.split(sizes, dim=-1)):
            if part.shape[-1] > 1:  # a near-tie may go either way
                top2 = part.topk(2, dim=-1).values
                wrong[:, k] &= ~(top2[:, 0] - top2[:, 1] < TOLERANCE)
        bad = int(wrong.any(-1).sum())
        if bad:
            raise ParityError(
                f"export check: {tool} chose another action than the checkpoint for "
                f"{bad} of {n} observations"
            )
        return 0.0
    diff = float((theirs - ours).abs().max())
    if diff > TOLERANCE:
        raise ParityError(
            f"export check: {tool}'s actions differ from the checkpoint's by up to "
            f"{diff:.3g} (tolerance {TOLERANCE:g})"
        )
    return diff


def read_metadata(path: str | os.PathLike[str]) -> dict:
    """The metadata inside an exported file (ONNX ``metadata_props`` or TorchScript's
    ``distrl.json``), as ``export_policy`` wrote it (without the parity entry)."""
    p = Path(path)
    if p.suffix == ".onnx":
        import onnx

        return {e.key: json.loads(e.value) for e in onnx.load(str(p)).metadata_props}
    files = {"distrl.json": ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.load(str(p), _extra_files=files)
    return json.loads(files["distrl.json"])


def describe(result: ExportResult) -> str:
    """What ``distrl export`` prints."""
    m = result.metadata
    out = m["output"]
    shape = ", ".join(str(d) for d in out["shape"])
    if result.max_abs_diff is not None:
        diff = f"max |diff| {result.max_abs_diff:.2g}"
        check = f"matches the checkpoint ({diff}, {result.checked_with})"
    else:
        check = result.checked_with
    return (
        f"{m['task']}: exported {m['export_format']} to {result.path} "
        f"(checkpoint {m['checkpoint']}, iteration {m['iteration']})\n"
        f"  obs [batch, {m['input']['shape'][1]}] {m['input']['dtype']}"
        + (" + memory" if m.get("memory") else "")
        + f" -> action [{shape}] {out['dtype']}, "
        f"normalizer {m['observation_normalization']}; {check}\n"
        f"  metadata: {result.metadata_path}"
    )
