"""The checkpoint file store: atomic save, verified load, file naming and newest-valid discovery.

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
writes), no logging (functions return what they skipped or noticed; the runner prints it), and
no rule about what a resume may change: that, ``--resume`` and the RNG state a checkpoint holds
are ``distrl.checkpoint``'s, which re-exports everything here.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

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
_MANIFEST_TYPES: dict[str, type] = {
    "file": str, "sha256": str, "size": int, "schema_version": int, "iteration": int,
    "manifest_sha256": str, "world_size": int, "config_hash": str, "config": dict,
    "env_steps": int, "task": str,
}  # fmt: skip
"""The type of each manifest field that has one: another type is a corrupt manifest (it was a
TypeError inside ``--resume auto`` instead of a fallback to the previous checkpoint)."""
DIGEST_KEY = "manifest_sha256"
"""The manifest's own digest: sha256 over every other key of it (``manifest_digest``), so the
config, task and world size it carries are covered like the data file is by ``sha256``."""


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
    """Parse and check the manifest of checkpoint ``path``: its keys and their types, schema
    version and iteration, its own digest (``DIGEST_KEY``, required: a manifest without it
    would switch the check off), and that the task it names imports no module
    (``registry.check_task_from_file``)."""
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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(path, f"unreadable manifest {mpath.name}: {e}") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(path, f"manifest {mpath.name} is not a JSON object")
    missing = [k for k in (*_MANIFEST_KEYS, DIGEST_KEY) if k not in manifest]
    if missing:
        raise CheckpointError(path, f"manifest {mpath.name} lacks {', '.join(missing)}")
    wrong = [
        f"{k} ({type(manifest[k]).__name__}, not {kind.__name__})"
        for k, kind in _MANIFEST_TYPES.items()
        if k in manifest and not (isinstance(manifest[k], kind) and type(manifest[k]) is not bool)
    ]
    if wrong:
        raise CheckpointError(path, f"manifest {mpath.name} has fields of the wrong type: "
                                    f"{', '.join(wrong)}")  # fmt: skip
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
    if manifest[DIGEST_KEY] != manifest_digest(manifest):
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
