"""A run directory, read: its config, its checkpoints and the policy they hold.

``load`` finds a run directory's newest valid checkpoint (or takes a checkpoint file) and
returns the config it trained with and its policy state; ``make_policy``/``load_policy`` build
the policy from them, and ``save_policy`` writes one as a policy-only checkpoint;
``init_policy`` is ``train --init-from``'s read, refused when the policy would not fit this run;
``check_run_dir_free`` refuses to start a new run over an old one, and ``RunLock`` a second live
run in the same directory.
``distrl play``, ``export``, ``distrl.load_policy`` and the training session read runs here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Any

import torch

from distrl import checkpoint as ckpt
from distrl.config import TrainConfig, from_dict, to_dict
from distrl.envs.core import VecEnv
from distrl.policy.actor_critic import ActorCritic
from distrl.safe_files import SymlinkRefused, open_fd


def load(path: str | Path, device: torch.device) -> tuple[TrainConfig, dict[str, Any], Path, dict]:
    """(config, policy state, checkpoint path, manifest) of a run directory's newest valid
    checkpoint, or of a checkpoint file."""
    p = Path(path)
    found = ckpt.resolve_resume(str(p), None)[0] if p.is_dir() else p
    if found is None:
        raise ValueError(f"no checkpoint found under {p}")
    state, manifest = ckpt.load_checkpoint(found, map_location=device)
    return from_dict(manifest["config"]), state["policy"], found, manifest


def make_policy(env: VecEnv, cfg: TrainConfig, state: dict[str, Any]) -> ActorCritic:
    """The policy ``cfg`` builds for ``env``'s spaces, with ``state`` loaded, in eval mode."""
    policy = ActorCritic.for_env(env, cfg.policy)
    policy.load_state_dict(state)
    return policy.eval()


def load_policy(path: str | Path, device: str = "cpu") -> tuple[ActorCritic, TrainConfig]:
    """(policy in eval mode, its run's config) from a run directory (newest valid checkpoint)
    or a checkpoint file. A registered network must be registered in this process too."""
    from distrl.envs.registry import get_task

    dev = torch.device(device)
    cfg, state, _, _ = load(str(path), dev)
    env = get_task(cfg.task).make_env(1, dev, cfg.env.max_episode_steps)
    try:
        return make_policy(env, cfg, state), cfg
    finally:
        env.close()


def save_policy(
    policy: ActorCritic,
    cfg: TrainConfig,
    path: str | Path,
    iteration: int = 0,
    env_steps: int = 0,
    world_size: int = 1,
) -> Path:
    """``policy`` (trained with ``cfg``) as a policy-only checkpoint at ``path`` (``*.pt``, the
    suffix added to a name without one; the manifest ``*.json`` beside it): the checkpoint
    format, written atomically with its sha256, that ``load_policy``, ``play``, ``export`` and
    ``--init-from`` read. Returns the path."""
    out = Path(path).expanduser()
    if out.suffix == "":  # "model" -> "model.pt", as Stable-Baselines3 adds ".zip"
        out = out.with_suffix(".pt")
    ckpt.check_policy_file_name(out, "save")
    state: dict[str, Any] = {"policy": {k: v.cpu() for k, v in policy.state_dict().items()}}
    state |= {"iteration": iteration, "env_steps": env_steps, "wall_time": 0.0}
    meta = ckpt.run_metadata(to_dict(cfg), world_size, env_steps) | {"policy_only": True}
    return ckpt.save_checkpoint(out.parent, iteration, state, meta, name=out.name)


def init_policy(cfg: TrainConfig) -> tuple[dict, Path, int]:
    """``--init-from``: (policy state, checkpoint, its iteration), refused with the fix when the
    checkpoint's task or policy settings differ from this run's (its weights would not fit)."""
    src = Path(cfg.init_from or "").expanduser()
    if not src.exists():
        raise ValueError(f"--init-from {cfg.init_from}: no such run directory or checkpoint file")
    theirs, state, path, manifest = load(str(src), torch.device("cpu"))
    mine = to_dict(cfg)
    if theirs.task != cfg.task:
        raise ValueError(
            f"--init-from {path}: its task is {theirs.task}, this run's {cfg.task}; a policy "
            f"fits only the observations and actions of its own task"
        )
    ours, other = mine["policy"], to_dict(theirs)["policy"]
    differ = [f"--policy.{k.replace('_', '-')} {other.get(k)} there, {v} here"
              for k, v in ours.items() if other.get(k) != v]  # fmt: skip
    if differ:
        raise ValueError(
            f"--init-from {path}: the policy differs ({'; '.join(differ)}); pass that run's "
            f"--policy settings"
        )
    return state, path, int(manifest["iteration"])


def check_run_dir_free(run_dir: str | None) -> None:
    """Refuse to start a new run in a directory that already holds one (metrics or
    checkpoints): its metrics would be appended to the old ones and its checkpoints mixed with
    theirs. An absent or empty directory, or one with neither, is free."""
    from distrl.telemetry import METRICS_FILE, read_metrics

    if run_dir is None:
        return
    path = Path(run_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--run-dir {run_dir} is a file; pass a directory (new or empty)")
    metrics = path / METRICS_FILE
    checkpoints = ckpt.list_checkpoints(path / "checkpoints")
    if not checkpoints and not (metrics.is_file() and metrics.stat().st_size > 0):
        return
    iterations = [ckpt.checkpoint_iteration(p) or 0 for p in checkpoints[:1]]
    if metrics.is_file():
        records = read_metrics(metrics)
        iterations += [r["iteration"] for r in records if isinstance(r.get("iteration"), int)]
    at = f"iteration {max(iterations)}" if iterations else "no iteration finished"
    raise ValueError(
        f"run dir {run_dir} already holds a run ({at}); pass --resume auto to continue it or "
        f"choose a new --run-dir"
    )


LOCK_FILE = ".lock"
LOCK_HOLDER_ENV = "DISTRL_RUN_LOCK_HOLDER"
"""The pid of the launcher (``distrl train --nproc N``) that holds the run directory's lock
for its ranks, in their environment: taken before any rank starts, so a second launch there
is refused before it starts any."""


class RunDirError(ValueError):
    """The run directory cannot be used (another run holds it, or it cannot be written): a
    user's error, said in one line before training (``cli.train_main`` prints it)."""


class RunLock:
    """An exclusive lock on a run directory (``fcntl.flock`` on ``RUN/.lock``, which holds the
    holder's pid, host and start time), taken by the process that writes the run (rank 0) and
    held while it trains. The kernel drops it when that process ends, however it ends, so a
    crashed run leaves no stale lock, and an elastic restart's new rank 0 takes it again. A
    second run in the same directory is refused naming the holder (ValueError).

    flock is per host: on a shared file system, two machines do not see each other's locks.

    ``launcher``: the pid of the launcher that started this rank (``LOCK_HOLDER_ENV``), which
    took the lock before it started any rank and holds it for the whole run; held by that
    pid, the lock is this run's, and this object holds nothing."""

    def __init__(self, run_dir: str | Path, launcher: str | None = None):
        path = Path(run_dir).expanduser()
        self.path = path / LOCK_FILE
        self.fd: int | None = None
        while True:
            try:
                path.mkdir(parents=True, exist_ok=True)
                # never through a link: one would have its target truncated below (safe_files)
                fd = open_fd(self.path, os.O_RDWR | os.O_CREAT)
            except SymlinkRefused:
                raise
            except OSError as e:  # a read-only or full disk, no permission: one line, no trace
                raise RunDirError(
                    f"run dir {run_dir} cannot be written ({e.strerror or e}): a run writes its "
                    f"lock, metrics and checkpoints there; free space or choose another --run-dir"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
                os.close(fd)
                if launcher and holder.startswith(f"pid {launcher} on "):
                    return  # the launcher of this rank's run holds it
                raise RunDirError(
                    f"run dir {run_dir} is in use by a live run ({holder}); wait for it to "
                    f"finish, stop it, or choose another --run-dir"
                ) from None
            try:  # the file a finishing holder removed is no lock: take the new one
                same = os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {stamp}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        """Remove ``RUN/.lock`` while holding it, then drop the lock (closing the descriptor);
        a run that takes the lock meanwhile sees the file gone and takes a new one."""
        if self.fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            os.close(self.fd)
            self.fd = None


def check_unlocked(run_dir: str | Path) -> None:
    """Refuse, before anything starts, a run directory a live run holds (``RunLock``)."""
    path = Path(run_dir).expanduser()
    if (path / LOCK_FILE).exists() or (path / LOCK_FILE).is_symlink():
        RunLock(path).release()


def lock_for_launch(run_dir: str | Path, fresh: bool) -> RunLock:
    """The launcher's lock on the run directory (``distrl train --nproc N``), taken before it
    starts torchrun or any rank and held until the run ends; its ranks find it held by their
    launcher (``LOCK_HOLDER_ENV``). Two launches racing for one new directory: the second is
    refused here (``RunDirError``, naming the holder's pid) and starts nothing. ``fresh``: the
    directory must hold no run, checked again under the lock (a run may have ended meanwhile)."""
    lock = RunLock(run_dir)
    try:
        if fresh:
            check_run_dir_free(str(run_dir))
    except ValueError:
        lock.release()
        raise
    return lock
