"""Checkpoints: atomic save, verified load, newest-valid discovery and resume compatibility.

A checkpoint is two files in one directory:

  ckpt_00000042.pt    the state, written by ``torch.save``
  ckpt_00000042.json  its manifest: file name, sha256, size, schema version, iteration and the
                      runner's metadata (config, config hash, world size, env steps, task)

Both are written to temporaries in the same directory first (flush, fsync), then renamed over
their names (``os.replace``, fsync the directory), the manifest strictly after the data file: a
save that fails, e.g. on a full disk, leaves the files it would have replaced as they were, and
raises ``CheckpointSaveError`` naming the directory. A data file without a manifest is an
unfinished save and is never loaded. Temp files start with ``.tmp-`` so that the discovery glob
``ckpt_[0-9]*.pt`` never sees them and carry the writer's pid; a killed save leaves them behind,
and ``remove_stale_temporaries`` deletes those whose writer is dead.

``prune_checkpoints`` (or ``save_checkpoint(..., keep=N)``) keeps the newest N checkpoints and
deletes older ones, but never the newest one that verifies, so a resume always has one left.

Loading verifies before unpickling: size and sha256 against the manifest (a flipped byte inside a
tensor's storage loads fine with ``torch.load`` alone and silently corrupts the policy), then
``torch.load(..., weights_only=True)``, which refuses arbitrary pickled objects instead of
running them; on a torch older than ``SAFE_TORCH`` (2.10), whose ``weights_only`` has known
holes, nothing is unpickled at all. Every failure is a ``CheckpointError`` that names the file
and the reason.

This module is pure file logic: no ``torch.distributed`` (the runner decides that rank 0
writes), no logging (functions return what they skipped or noticed; the runner prints it).
"""

from __future__ import annotations

import copy
import errno
import hashlib
import io
import json
import os
import random
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from distrl.install import torch_install

SCHEMA_VERSION = 1
"""Layout version of the manifest and of the state dict the runner stores."""

KNOWN_SCHEMA_VERSIONS = frozenset({1})

CHECKPOINT_GLOB = "ckpt_[0-9]*.pt"
"""Discovery pattern; temp files (``.tmp-...``) never match it."""

_NAME_RE = re.compile(r"^ckpt_(\d+)\.pt$")
_TMP_PREFIX = ".tmp-"
# What _temp_path names the temporaries of a saved file (a checkpoint, best.pt, bc.pt, an
# average) and of its manifest: the file's name, the writer's pid, 8 hex digits.
_TMP_RE = re.compile(r"^\.tmp-(?P<name>[^/]+\.(pt|json))\.(?P<pid>\d+)\.[0-9a-f]+$")
# Keys this module owns in the manifest; runner metadata may not shadow them.
_MANIFEST_KEYS = ("file", "sha256", "size", "schema_version", "iteration")
DIGEST_KEY = "manifest_sha256"
"""The manifest's own digest: sha256 over every other key of it (``manifest_digest``), so the
config, task and world size it carries are covered like the data file is by ``sha256``."""

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


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; ``str()`` names the file and the reason."""

    def __init__(self, path: Path | str | None, reason: str) -> None:
        self.path = None if path is None else Path(path)
        self.reason = reason
        super().__init__(f"checkpoint {self.path}: {reason}" if path is not None else reason)

    def __reduce__(self):  # keep picklable (multiprocessing) despite the two-argument __init__
        return (type(self), (self.path, self.reason))


SAFE_TORCH = (2, 10)
"""The oldest torch whose ``torch.load(weights_only=True)`` we trust with a file from elsewhere:
it can run code on torch <= 2.5.1 (CVE-2025-32434) and corrupt memory before 2.10
(CVE-2026-24747). pyproject.toml requires at least this release."""


def torch_release(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of ``version`` (default: the running torch), e.g. (2, 13)."""
    m = re.match(r"(\d+)\.(\d+)", version if version is not None else str(torch.__version__))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def unsafe_torch(what: str = "checkpoint") -> str | None:
    """Why this torch may not unpickle a ``what`` file (older than ``SAFE_TORCH``), or None."""
    if torch_release() >= SAFE_TORCH:
        return None
    need = ".".join(map(str, SAFE_TORCH))
    return (
        f"refusing to load a {what} with torch {torch.__version__}: before {need}, "
        f"torch.load(weights_only=True) can run code (CVE-2025-32434, torch <= 2.5.1) or "
        f"corrupt memory (CVE-2026-24747) when a file is crafted; upgrade with "
        f"{torch_install(f'torch>={need}')}"
    )


def require_safe_torch(path: Path | str, what: str = "checkpoint") -> None:
    """Refuse to unpickle ``path`` on a torch older than ``SAFE_TORCH``."""
    why = unsafe_torch(what)
    if why is not None:
        raise CheckpointError(path, why)


# ----------------------------------------------------------------------------------- paths


def checkpoint_path(directory: Path, iteration: int) -> Path:
    """``directory / ckpt_{iteration:08d}.pt`` (zero-padded so names sort like numbers)."""
    return Path(directory) / f"ckpt_{iteration:08d}.pt"


def manifest_path(path: Path) -> Path:
    """The manifest that belongs to checkpoint ``path`` (same stem, ``.json``)."""
    return Path(path).with_suffix(".json")


def check_policy_file_name(path: Path, what: str) -> None:
    """A policy-only file (``best.pt``, an average, a saved policy) is named ``*.pt`` and never
    ``ckpt_*.pt``, which resume discovery would take for a training checkpoint; ``what`` names
    the option or argument that gave ``path``."""
    if Path(path).suffix != ".pt" or checkpoint_iteration(path) is not None:
        raise ValueError(
            f"{what} {path}: name it *.pt, not {CHECKPOINT_GLOB} (resume would take it for a "
            f"training checkpoint)"
        )


def checkpoint_iteration(path: Path) -> int | None:
    """Iteration encoded in a checkpoint file name, or None when the name is not ours."""
    m = _NAME_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint data files in ``directory``, newest (highest iteration) first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.glob(CHECKPOINT_GLOB) if checkpoint_iteration(p) is not None]
    return sorted(found, key=lambda p: checkpoint_iteration(p) or 0, reverse=True)


# ------------------------------------------------------------------------------------ save


def _fsync_dir(directory: Path) -> None:
    # The rename is only durable once the directory entry is on disk (POSIX).
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_path(path: Path) -> Path:
    """``.tmp-<name>.<pid>.<8 hex digits>`` next to ``path`` (matched by ``_TMP_RE``): the pid
    tells ``remove_stale_temporaries`` whether the writer is still alive."""
    # Same directory as the target: os.replace is only atomic within one filesystem.
    return path.with_name(f"{_TMP_PREFIX}{path.name}.{os.getpid()}.{secrets.token_hex(4)}")


_WRITING: set[Path] = set()
"""Temporaries this process is writing now (``remove_stale_temporaries`` spares them)."""


def _write(tmp: Path, payload: bytes | memoryview) -> None:
    with open(tmp, "wb") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())


def _replace_all(pairs: list[tuple[Path, bytes | memoryview]]) -> None:
    """Write every ``(path, payload)`` to a temporary first (flushed, fsynced), then rename them
    over their paths in order: a failure while writing (a full disk) leaves every old file as
    it was."""
    temps = [_temp_path(path) for path, _ in pairs]
    _WRITING.update(temps)
    try:
        for tmp, (_, payload) in zip(temps, pairs, strict=True):
            _write(tmp, payload)
        for tmp, (path, _) in zip(temps, pairs, strict=True):
            os.replace(tmp, path)
    except BaseException:
        # A clean failure tidies up; a kill leaves the temporaries, which discovery ignores and
        # remove_stale_temporaries deletes once this process is gone.
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        raise
    finally:
        _WRITING.difference_update(temps)
    _fsync_dir(pairs[0][0].parent)


class CheckpointSaveError(OSError):
    """A save that failed (a full disk, a read-only or vanished directory, ...): the files that
    were there before it, the last good checkpoint included, are as they were."""

    def __init__(self, directory: Path | str, what: str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.directory, self.what, self.cause = Path(directory), what, cause

    def __str__(self) -> str:
        code = errno.errorcode.get(self.errno or 0)
        reason = f"{self.strerror} ({code})" if code else str(self.cause)
        hint = (
            "free some space there"
            if self.errno in (errno.ENOSPC, errno.EDQUOT)
            else "check that the directory exists and is writable"
        )
        return (
            f"could not save {self.what} in {self.directory}: {reason}; the files already there "
            f"are untouched (the previous checkpoint is still good); {hint}, then resume with "
            f"--resume auto"
        )

    def __reduce__(self):  # keep picklable (multiprocessing) despite the custom __init__
        return (type(self), (self.directory, self.what, self.cause))


def save_checkpoint(
    directory: Path,
    iteration: int,
    state: dict,
    meta: dict,
    keep: int | None = None,
    name: str | None = None,
) -> Path:
    """Write ``state`` as checkpoint ``iteration`` in ``directory``; return the data file path.

    ``name`` (e.g. ``best.pt``) writes that file instead of ``ckpt_<iteration>.pt``: the same
    format and atomicity, but not a checkpoint that resume discovery or pruning ever sees.

    ``meta`` (JSON-serialisable) goes into the manifest next to file, sha256, size,
    schema_version and iteration. The runner passes config, config_hash, world_size, env_steps
    and task. ``state`` should hold only what ``torch.load(weights_only=True)`` accepts:
    tensors, dicts, lists, tuples, str, int, float, bool, None (see ``capture_rng_state``).

    Both files are written to temporaries first, then renamed over their names, the manifest
    last: a save that fails (``CheckpointSaveError``, naming the directory) leaves the file it
    was replacing, e.g. the previous ``best.pt``, loadable. Only a kill between the two renames
    leaves new data under an old manifest, which then fails its sha256 like any corrupt file.

    With ``keep``, once the save has succeeded, older checkpoints beyond the newest ``keep`` are
    deleted as by ``prune_checkpoints``; the one just written is never among them.
    """
    if not isinstance(iteration, int) or iteration < 0:
        raise ValueError(f"iteration must be a non-negative int, got {iteration!r}")
    _check_keep(keep)
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    clash = sorted(set(meta) & {*_MANIFEST_KEYS, DIGEST_KEY})
    if clash:
        raise ValueError(f"meta may not set manifest keys {clash}; they are computed here")
    directory = Path(directory)
    path = directory / name if name is not None else checkpoint_path(directory, iteration)
    manifest_file = manifest_path(path)
    # Fail on unserialisable metadata before touching any file.
    json.dumps(meta)

    # Serialise in memory once: the bytes we hash are exactly the bytes we write.
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getbuffer()
    digest = hashlib.sha256(data).hexdigest()
    manifest = {
        **meta,
        "file": path.name,
        "sha256": digest,
        "size": len(data),
        "schema_version": SCHEMA_VERSION,
        "iteration": iteration,
    }
    manifest[DIGEST_KEY] = manifest_digest(manifest)
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(directory, path.name)  # what killed saves of this file left
        _replace_all([(path, data), (manifest_file, text.encode())])
    except OSError as e:
        raise CheckpointSaveError(directory, path.name, e) from None
    if keep is not None:
        _prune(directory, keep, just_saved=path)
    return path


# ------------------------------------------------------------------------------- cleanup


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process: its live temporaries are in _WRITING
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process, or cannot tell: leave its files alone
    return True


def remove_stale_temporaries(directory: Path, name: str | None = None) -> list[Path]:
    """Delete the temporaries killed saves left in ``directory``; return them.

    Only names that ``save_checkpoint`` gives its temporaries are touched (``.tmp-`` + a
    checkpoint's, ``best.pt``'s, ``bc.pt``'s, an average's or their manifests' name + the
    writer's pid + 8 hex digits), with ``name`` only those of that file and its manifest, and
    only those whose writer is dead: a live process's temporaries (another run's save in
    progress) are never touched; this process's only when it is not writing them. The pid is
    this machine's: one run directory is written from one machine.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    wanted = None if name is None else {name, manifest_path(Path(name)).name}
    stale = []
    for p in sorted(directory.glob(f"{_TMP_PREFIX}*")):
        m = _TMP_RE.match(p.name)
        if m is None or (wanted is not None and m.group("name") not in wanted):
            continue
        if p in _WRITING or _pid_alive(int(m.group("pid"))) or not p.is_file():
            continue
        p.unlink(missing_ok=True)
        stale.append(p)
    return stale


def prune_checkpoints(directory: Path, keep: int) -> list[Path]:
    """Delete the checkpoints of ``directory`` beyond the newest ``keep`` (by iteration), each
    with its manifest; return the deleted data files, newest first.

    The newest checkpoint that verifies (``find_latest_valid``'s answer) is never deleted: when
    the newest ``keep`` are corrupt or unfinished it survives outside them, so that a resume
    still has something to continue from. Verification stops at the first valid checkpoint,
    newest first; usually that is the newest, the only one read.
    """
    _check_keep(keep)
    return _prune(Path(directory), keep, just_saved=None)


def _check_keep(keep: int | None) -> None:
    if keep is not None and (not isinstance(keep, int) or keep < 1):
        raise ValueError(f"keep must be a positive int or None, got {keep!r}")


def _prune(directory: Path, keep: int, just_saved: Path | None) -> list[Path]:
    found = list_checkpoints(directory)
    if len(found) <= keep:
        return []
    spared = {*found[:keep], _newest_valid(found, just_saved), just_saved}
    removed = []
    for path in found[keep:]:
        if path in spared:
            continue
        # Data first: a crash in between leaves a manifest without data, which discovery (it
        # starts from the data files) never sees; the other order would leave an unfinished save.
        path.unlink(missing_ok=True)
        manifest_path(path).unlink(missing_ok=True)
        removed.append(path)
    return removed


def _newest_valid(found: list[Path], known_valid: Path | None) -> Path | None:
    """First of ``found`` (newest first) that verifies; ``known_valid`` is taken as valid."""
    for path in found:
        if path == known_valid:
            return path
        try:
            verify_checkpoint(path)
        except CheckpointError:
            continue
        return path
    return None


# ------------------------------------------------------------------------------------ load


def manifest_digest(manifest: dict) -> str:
    """sha256 over the manifest's keys but ``DIGEST_KEY`` (JSON, sorted keys, no spaces)."""
    body = {k: v for k, v in manifest.items() if k != DIGEST_KEY}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def read_manifest(path: Path) -> dict:
    """Parse and check the manifest of checkpoint ``path``: its keys, schema version and
    iteration, its own digest (``DIGEST_KEY``; manifests written before it existed have none),
    and that the task it names imports no module (``registry.check_task_from_file``)."""
    path = Path(path)
    mpath = manifest_path(path)
    if not mpath.is_file():
        raise CheckpointError(
            path,
            f"missing manifest {mpath.name} (the save did not finish; a checkpoint is complete "
            f"only once its manifest is written)",
        )
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(path, f"unreadable manifest {mpath.name}: {e}") from e
    if not isinstance(manifest, dict):
        raise CheckpointError(path, f"manifest {mpath.name} is not a JSON object")
    missing = [k for k in _MANIFEST_KEYS if k not in manifest]
    if missing:
        raise CheckpointError(path, f"manifest {mpath.name} lacks {', '.join(missing)}")
    version = manifest["schema_version"]
    if version not in KNOWN_SCHEMA_VERSIONS:
        raise CheckpointError(
            path,
            f"schema version {version!r} is not supported by this distrl (it reads "
            f"{sorted(KNOWN_SCHEMA_VERSIONS)}); use the distrl version that wrote it",
        )
    named = checkpoint_iteration(path)
    if named is not None and manifest["iteration"] != named:
        raise CheckpointError(
            path, f"manifest {mpath.name} says iteration {manifest['iteration']}, name says {named}"
        )
    if DIGEST_KEY in manifest and manifest[DIGEST_KEY] != manifest_digest(manifest):
        raise CheckpointError(
            path,
            f"manifest {mpath.name} was modified after it was written: its {DIGEST_KEY} does "
            f"not match its contents (the config, task and world size it carries); refusing it",
        )
    config = manifest.get("config")
    tasks = [manifest.get("task"), config.get("task") if isinstance(config, dict) else None]
    if any(isinstance(t, str) and t.startswith("gym:") for t in tasks):
        from distrl.envs.registry import check_task_from_file

        for task in tasks:
            try:
                check_task_from_file(task, f"the manifest {mpath}")
            except ValueError as e:
                raise CheckpointError(path, str(e)) from None
    return manifest


def load_checkpoint(path: Path, map_location: Any = "cpu") -> tuple[dict, dict]:
    """Verify and load checkpoint ``path``; return ``(state, manifest)``.

    Checks, in order: the file exists and is non-empty, its manifest exists and has a known
    schema version, size and sha256 match the manifest, and the bytes load with
    ``weights_only=True`` into a dict. Raises ``CheckpointError`` naming the first failure.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(path, "does not exist")
    if not path.is_file():
        raise CheckpointError(path, "is not a file")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(path, "empty file (0 bytes)")
    manifest = read_manifest(path)
    expected = manifest["size"]
    if size < expected:
        raise CheckpointError(path, f"truncated: {size} bytes, manifest says {expected}")
    if size != expected:
        raise CheckpointError(path, f"size mismatch: {size} bytes, manifest says {expected}")
    # Load from the very bytes we hash, so nothing can change between check and use.
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest["sha256"]:
        raise CheckpointError(
            path,
            f"sha256 mismatch: file has {digest}, manifest says {manifest['sha256']} "
            f"(the file was modified or corrupted after it was written)",
        )
    require_safe_torch(path)
    try:
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError, ... depending on cause
        raise CheckpointError(path, f"not loadable with weights_only=True: {e}") from e
    if not isinstance(state, dict):
        raise CheckpointError(path, f"expected a dict of state, got {type(state).__name__}")
    return state, manifest


def verify_checkpoint(path: Path) -> dict:
    """Full verification of ``path`` (including the load); return its manifest."""
    return load_checkpoint(path)[1]


def find_latest_valid(directory: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """Newest checkpoint in ``directory`` that verifies, and the newer ones skipped with why.

    Returns ``(None, skipped)`` when none verifies (``skipped`` is empty when there are none).
    Each candidate is fully verified, load included: checkpoints are small and a "valid"
    answer that then fails to load would defeat the purpose.
    """
    skipped: list[tuple[Path, str]] = []
    for path in list_checkpoints(directory):
        try:
            verify_checkpoint(path)
        except CheckpointError as e:
            skipped.append((path, e.reason))
            continue
        return path, skipped
    return None, skipped


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


# ------------------------------------------------------------------------------------ RNG


def capture_rng_state() -> dict:
    """Global RNG states of torch (CPU, CUDA), numpy and ``random``, safe for weights_only.

    ``torch.load(weights_only=True)`` refuses numpy arrays and arbitrary objects, so numpy's
    MT19937 key becomes an int64 tensor and every other part a plain int/float/str/list.
    CUDA states are captured only when CUDA is initialised (otherwise nothing drew from them).
    """
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    py_version, py_internal, py_gauss_next = random.getstate()
    cuda = (
        [s.clone() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_initialized() else []
    )
    return {
        "torch": torch.get_rng_state(),
        "cuda": cuda,
        "numpy": {
            "bit_generator": str(np_name),
            # uint32 key words fit in int64 exactly.
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "python": {
            "version": int(py_version),
            "internal": [int(x) for x in py_internal],
            "gauss_next": None if py_gauss_next is None else float(py_gauss_next),
        },
    }


def restore_rng_state(d: dict) -> None:
    """Inverse of ``capture_rng_state`` (after any ``map_location``: tensors may be anywhere).

    CUDA states are restored for the devices both the capture and this process have; a run
    moved from GPU to CPU simply has none to restore.
    """
    missing = [k for k in ("torch", "cuda", "numpy", "python") if k not in d]
    if missing:
        raise ValueError(f"RNG state lacks {', '.join(missing)}")
    torch.set_rng_state(d["torch"].to(device="cpu", dtype=torch.uint8))
    if d["cuda"] and torch.cuda.is_available():
        n = min(len(d["cuda"]), torch.cuda.device_count())
        for i in range(n):
            torch.cuda.set_rng_state(d["cuda"][i].to(device="cpu", dtype=torch.uint8), i)
    npd = d["numpy"]
    np.random.set_state(
        (
            npd["bit_generator"],
            npd["keys"].cpu().numpy().astype(np.uint32),
            int(npd["pos"]),
            int(npd["has_gauss"]),
            float(npd["cached_gaussian"]),
        )
    )
    pyd = d["python"]
    random.setstate(
        (int(pyd["version"]), tuple(int(x) for x in pyd["internal"]), pyd["gauss_next"])
    )
