"""Checkpoints and resume: which checkpoint ``--resume`` names, whether this run may continue it
(config hash, world size, the fields that may change) and the RNG state a checkpoint carries.

How the files are written, verified, named and found is the file store's
(``distrl.checkpoint_store``: atomic save, verified ``weights_only`` load, newest-valid
discovery, pruning); every name of it is re-exported here, so ``from distrl import checkpoint as
ckpt`` gives callers both halves. A resume takes the newest checkpoint that verifies, and a
``MUST_MATCH`` field changed or another world size refuses it (``check_resume_compatible``)
rather than continuing a different run.

Like the store, this module is pure logic: no ``torch.distributed``, no logging.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from distrl.checkpoint_store import (
    CHECKPOINT_GLOB,
    DIGEST_KEY,
    KNOWN_SCHEMA_VERSIONS,
    SAFE_TORCH,
    SCHEMA_VERSION,
    CheckpointError,
    CheckpointSaveError,
    check_policy_file_name,
    checkpoint_iteration,
    checkpoint_path,
    find_latest_valid,
    list_checkpoints,
    load_checkpoint,
    manifest_digest,
    manifest_path,
    prune_checkpoints,
    read_manifest,
    remove_stale_temporaries,
    require_safe_torch,
    save_checkpoint,
    torch_release,
    unsafe_torch,
    verify_checkpoint,
)
from distrl.seeding import capture_rng_state, restore_rng_state  # re-exported

__all__ = [
    # the file store's, re-exported (distrl.checkpoint_store)
    "CHECKPOINT_GLOB",
    "DIGEST_KEY",
    "KNOWN_SCHEMA_VERSIONS",
    "SAFE_TORCH",
    "SCHEMA_VERSION",
    "CheckpointError",
    "CheckpointSaveError",
    "check_policy_file_name",
    "checkpoint_iteration",
    "checkpoint_path",
    "find_latest_valid",
    "list_checkpoints",
    "load_checkpoint",
    "manifest_digest",
    "manifest_path",
    "prune_checkpoints",
    "read_manifest",
    "remove_stale_temporaries",
    "require_safe_torch",
    "save_checkpoint",
    "torch_release",
    "unsafe_torch",
    "verify_checkpoint",
    # resume
    "LATER_FIELDS",
    "MUST_MATCH",
    "capture_rng_state",
    "check_resume_compatible",
    "config_hash",
    "resolve_resume",
    "restore_rng_state",
    "run_metadata",
]

MUST_MATCH: tuple[str, ...] = (
    "task",  # a different task has other obs/action spaces and another reward
    "policy",  # network shapes, activation, log-std head, obs normalizer: the state's layout
    "env.max_episode_steps",  # the time limit is part of the MDP being optimised
    "env.num_envs",  # per-rank env/normalizer/RNG state is sized by it, like world_size
)
"""Dotted config fields (a name covers its whole subtree) that a resume must keep unchanged.

They are hashed into ``config_hash``. Every other field is safe to change on resume (e.g.
``agent.max_iterations``); ``check_resume_compatible`` reports such changes as notes.
"""

LATER_FIELDS: dict[str, Any] = {
    "policy.reward_normalization": False,
    "policy.network": "mlp",
    "policy.popart_tasks": 0,
}
"""``MUST_MATCH`` fields added after checkpoints were first written, with the value that means
what older checkpoints did: at that value they are left out of ``config_hash`` (and a manifest
without them compares equal), so checkpoints from before the field existed still resume."""

_IGNORED_ON_RESUME = ("resume",)
"""Fields whose change on resume is expected and not worth a note."""


# ---------------------------------------------------------------------------------- resume


def _describe(skipped: list[tuple[Path, str]]) -> str:
    return "\n".join(f"  - {p.name}: {reason}" for p, reason in skipped)


def _latest_or_raise(directory: Path, what: str) -> tuple[Path, list[tuple[Path, str]]]:
    path, skipped = find_latest_valid(directory)
    if path is None:
        raise CheckpointError(
            directory,
            f"{what} holds {len(skipped)} checkpoint(s) and none is valid; refusing to start "
            f"from scratch silently:\n{_describe(skipped)}",
        )
    return path, skipped


def resolve_resume(resume: str, run_dir: Path | None) -> tuple[Path | None, list[tuple[Path, str]]]:
    """Turn ``--resume`` into a checkpoint path; also return newer checkpoints skipped, with why.

    ``resume`` may be:
      - a checkpoint file: returned as is (``load_checkpoint`` verifies it);
      - a run directory (its ``checkpoints/``) or a checkpoints directory: newest valid;
      - ``"auto"``: newest valid in ``run_dir/checkpoints``. No checkpoint at all returns
        ``(None, [])``, meaning a fresh run: this is how torchrun restarts use it, and the first
        start has nothing yet. Checkpoints that exist but all fail verification raise.

    An explicit path never falls back to a fresh run: missing or invalid raises
    ``CheckpointError``.
    """
    if resume == "auto":
        if run_dir is None:
            raise CheckpointError(
                None,
                "--resume auto needs --run-dir: the default run directory is new on every "
                "start, so a restart would never find the checkpoints of the run it continues",
            )
        ckdir = Path(run_dir) / "checkpoints"
        if not list_checkpoints(ckdir):
            return None, []
        return _latest_or_raise(ckdir, "--resume auto: the run's checkpoint directory")

    path = Path(resume).expanduser()
    if not path.exists():
        raise CheckpointError(path, "--resume path does not exist")
    if path.is_file():
        if checkpoint_iteration(path) is None and read_manifest(path).get("policy_only"):
            raise CheckpointError(
                path,
                "holds only a policy (the best evaluation's, a clone's or an average, for "
                "play, export and --init-from), not the optimizer, env and RNG states a resume "
                "continues; "
                f"resume from a {CHECKPOINT_GLOB} file or the run directory",
            )
        return path, []
    ckdir = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    if not list_checkpoints(ckdir):
        raise CheckpointError(
            path,
            f"no checkpoints to resume from: expected {CHECKPOINT_GLOB} files in "
            f"{path / 'checkpoints'} (a run directory) or in {path} itself",
        )
    return _latest_or_raise(ckdir, "--resume directory")


# ------------------------------------------------------------------------- compatibility


def _flatten(d: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _flatten(value, name + ".")
        else:
            yield name, value


def _jsonable(d: dict) -> dict:
    # Tuples in a live config are lists in a stored manifest; compare both as JSON sees them.
    return json.loads(json.dumps(d))


def _is_must_match(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in MUST_MATCH)


_MISSING = "<missing>"


def _get(d: dict, dotted: str) -> Any:
    node: Any = d
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def run_metadata(cfg_dict: dict, world_size: int, env_steps: int) -> dict:
    """A runner's manifest metadata: task, world size, env steps, the config and its hash."""
    return {
        "task": cfg_dict["task"],
        "world_size": world_size,
        "env_steps": env_steps,
        "config": cfg_dict,
        "config_hash": config_hash(cfg_dict),
    }


def _without_later_defaults(cfg_dict: dict) -> dict:
    """A copy without the ``LATER_FIELDS`` that hold their old-behaviour value."""
    out = copy.deepcopy(cfg_dict)
    for dotted, old in LATER_FIELDS.items():
        *parents, leaf = dotted.split(".")
        node = out
        for p in parents:
            node = node.get(p, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict) and node.get(leaf, old) == old:
            node.pop(leaf, None)
    return out


def config_hash(cfg_dict: dict) -> str:
    """sha256 over the ``MUST_MATCH`` fields of a config dict (``config.to_dict``).

    JSON with sorted keys, tuples as lists, absent fields as null, so that the hash of a live
    config equals the hash of the same config read back from a manifest.
    """
    cfg = _jsonable(_without_later_defaults(cfg_dict))
    picked = {}
    for name in MUST_MATCH:
        value = _get(cfg, name)
        picked[name] = None if value is _MISSING else value
    blob = json.dumps(picked, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _fmt(value: Any) -> str:
    return value if value is _MISSING else json.dumps(value)


def check_resume_compatible(manifest: dict, cfg_dict: dict, world_size: int) -> list[str]:
    """Raise ``CheckpointError`` if this run cannot honour the checkpoint; else return notes.

    Refused: an unknown schema version, a different world size, or any ``MUST_MATCH`` field
    changed (detected by ``config_hash``; the differing fields are listed when the manifest
    stores the full ``config``). Returned: one note per other changed field, e.g.
    ``"agent.max_iterations: 100 -> 200"``, for the runner to print.
    """
    name = manifest.get("file", "<unknown checkpoint>")
    problems: list[str] = []

    version = manifest.get("schema_version")
    if version not in KNOWN_SCHEMA_VERSIONS:
        problems.append(
            f"schema version {version!r} is not supported (this distrl reads "
            f"{sorted(KNOWN_SCHEMA_VERSIONS)})"
        )

    saved_ws = manifest.get("world_size")
    if saved_ws is None:
        problems.append("manifest has no world_size")
    elif saved_ws != world_size:
        problems.append(
            f"saved with world_size {saved_ws}, resuming with world_size {world_size}: per-rank "
            f"env and RNG state cannot be re-split over a different number of ranks; resume "
            f"with {saved_ws} processes, or start a new run (new --run-dir) from scratch"
        )

    saved_cfg = manifest.get("config")
    current = _jsonable(cfg_dict)
    saved_hash = manifest.get("config_hash")
    if saved_hash is None:
        problems.append("manifest has no config_hash")
    elif saved_hash != config_hash(current):
        if isinstance(saved_cfg, dict):
            saved_cfg = _without_later_defaults(saved_cfg)
            current = _without_later_defaults(current)
            diffs = [
                f"{f}: {_fmt(_get(saved_cfg, f))} -> {_fmt(_get(current, f))}"
                for f in sorted(
                    {n for n, _ in _flatten(saved_cfg)} | {n for n, _ in _flatten(current)}
                )
                if _is_must_match(f) and _get(saved_cfg, f) != _get(current, f)
            ]
            # Same fields but another hash: the hash was computed over other MUST_MATCH fields.
            detail = "; ".join(diffs) or "config_hash differs (written by another distrl version?)"
        else:
            detail = "config_hash differs (the manifest stores no config to name the fields)"
        problems.append(
            f"config differs in fields that must match on resume ({', '.join(MUST_MATCH)}): "
            f"{detail}; use the original values, or start a new run (new --run-dir)"
        )

    if problems:
        raise CheckpointError(name, "cannot resume:\n  - " + "\n  - ".join(problems))

    notes: list[str] = []
    if isinstance(saved_cfg, dict):
        saved_flat = dict(_flatten(saved_cfg))
        current_flat = dict(_flatten(current))
        for f in sorted(saved_flat.keys() | current_flat.keys()):
            if _is_must_match(f) or f in _IGNORED_ON_RESUME:
                continue
            old, new = saved_flat.get(f, _MISSING), current_flat.get(f, _MISSING)
            if old != new:
                notes.append(f"{f}: {_fmt(old)} -> {_fmt(new)}")
    return notes
