"""Offscreen frames of one env, written to an mp4: what ``distrl play RUN --video out.mp4`` uses.

Three kinds of task render:

* the built-in torch envs that draw themselves with numpy (``render_rgb``, ``envs/draw.py``):
  ``cartpole``, ``cartpole-novel``, ``acrobot``, ``pendulum`` and the ``minatar-*`` games;
* the batched MuJoCo tasks (``halfcheetah``, ``hopper``, ``walker2d``, ``ant``): row 0's
  ``qpos``/``qvel`` are copied into a scratch ``MjData`` and drawn by ``mujoco.Renderer`` at
  Gymnasium's default 480x480, with a camera placed by the task's ``camera`` (Gymnasium v5's
  ``DEFAULT_CAMERA_CONFIG``) that looks at the robot's centre of mass every frame;
* ``gym:<Id>`` tasks whose Gymnasium env renders ``render_mode="rgb_array"`` (Gymnasium draws).

Headless OpenGL: mujoco reads ``MUJOCO_GL`` once, when it is first imported, so ``headless_gl``
must run before that. With no display and no ``MUJOCO_GL`` it picks ``egl``: Mesa's EGL renders on
the CPU (llvmpipe) when there is no GPU; ``osmesa`` only when libOSMesa is there and libEGL is not.

The mp4 is written by imageio-ffmpeg (the ``video`` extra), whose wheel bundles an ffmpeg binary.
"""

from __future__ import annotations

import ctypes.util
import os
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, cast

import numpy as np
import torch

from distrl.envs.core import VecEnv
from distrl.install import pip_install

if TYPE_CHECKING:
    from distrl.envs.gym import GymVecEnv
    from distrl.envs.mujoco import MujocoVecEnv

VIDEO_SIZE = (480, 480)
"""(height, width) of the MuJoCo tasks' frames: Gymnasium's MujocoEnv default."""

INSTALL_VIDEO = pip_install("video")


class RenderUnavailable(RuntimeError):
    """Rendering failed to start; the message names the system packages and ``MUJOCO_GL``."""


class Frames(Protocol):
    """RGB frames of one env's current state, ``fps`` of them per second of its time."""

    fps: float

    def render(self) -> np.ndarray:
        """[H, W, 3] uint8."""

    def close(self) -> None: ...


def headless_gl() -> None:
    """Set ``MUJOCO_GL`` when there is no display and it is unset (a value you set is kept).

    Must run before ``mujoco`` is imported (gymnasium's MuJoCo envs import it too).
    """
    no_display = not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if "MUJOCO_GL" not in os.environ and no_display:
        only_osmesa = not ctypes.util.find_library("EGL") and ctypes.util.find_library("OSMesa")
        os.environ["MUJOCO_GL"] = "osmesa" if only_osmesa else "egl"


def _unavailable(error: Exception) -> RenderUnavailable:
    backend = os.environ.get("MUJOCO_GL") or "glfw"
    return RenderUnavailable(
        f"could not render offscreen with MUJOCO_GL={backend} ({type(error).__name__}: {error}). "
        f"When OpenGL fails to start without a display, install Mesa's EGL (Debian/Ubuntu: "
        f"apt-get install libegl1 libegl-mesa0) for MUJOCO_GL=egl, or OSMesa (apt-get install "
        f"libosmesa6) for MUJOCO_GL=osmesa; with a display, use MUJOCO_GL=glfw. Set MUJOCO_GL "
        f"before Python starts: mujoco reads it once, when it is first imported."
    )


class MujocoFrames:
    """Frames of row 0 of a batched MuJoCo env (``distrl.envs.mujoco.MujocoVecEnv``)."""

    def __init__(self, env: MujocoVecEnv) -> None:
        import mujoco

        self.env = env
        self.fps = 1.0 / env.dt
        self._data = mujoco.MjData(env.model)
        self._camera = mujoco.MjvCamera()  # a free camera: azimuth 90 looks at the robot's side
        for name, value in env.camera.items():
            setattr(self._camera, name, value)
        try:
            self._renderer = mujoco.Renderer(env.model, *VIDEO_SIZE)
        except Exception as e:
            raise _unavailable(e) from e

    def render(self) -> np.ndarray:
        """[H, W, 3] uint8 of the env's current state."""
        import mujoco

        m, d = self.env.model, self._data
        d.qpos[:], d.qvel[:] = self.env.qpos[0], self.env.qvel[0]
        mujoco.mj_forward(m, d)
        # Follow the torso's subtree (the whole robot) exactly; MuJoCo's own tracking camera
        # low-pass filters its target and falls metres behind a running cheetah.
        self._camera.lookat[:] = d.subtree_com[1]
        self._renderer.update_scene(d, self._camera)
        return self._renderer.render()

    def close(self) -> None:
        self._renderer.close()  # before interpreter exit, where EGL teardown would raise


class TorchFrames:
    """Row 0 of a built-in torch env that draws itself (``render_rgb``: cartpole, acrobot,
    pendulum, the MinAtar games), at the env's own rate (``render_fps``)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.fps = float(env.render_fps)

    def render(self) -> np.ndarray:
        frame: np.ndarray = self.env.render_rgb()
        return frame

    def close(self) -> None:
        """Nothing held."""


class GymFrames:
    """Frames of sub-env 0 of a ``GymVecEnv`` built with ``render_mode="rgb_array"``."""

    def __init__(self, env: GymVecEnv) -> None:
        self.env = env
        self.fps = float(env.vector_env.metadata.get("render_fps") or 30)

    def render(self) -> np.ndarray:
        import gymnasium

        try:
            # Built with render_mode="rgb_array": one frame per sub-env (None only without a
            # render mode; indexing it then fails like any other renderer error below).
            frame = cast("tuple[Any, ...]", self.env.vector_env.render())[0]
        except gymnasium.error.DependencyNotInstalled as e:
            raise ImportError(f"gym:{self.env.env_id} cannot render: {e}") from e
        except Exception as e:
            raise _unavailable(e) from e
        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
            raise ValueError(f"gym:{self.env.env_id} rendered {type(frame).__name__}, not RGB")
        return frame

    def close(self) -> None:
        """The env closes Gymnasium's renderer."""


def _import_mujoco() -> None:
    """Import mujoco now, if installed: it starts the ``MUJOCO_GL`` backend's libraries, whose
    failure (e.g. osmesa without libOSMesa) would otherwise surface inside some env's import."""
    try:
        import mujoco  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "mujoco":
            raise _unavailable(e) from e
    except Exception as e:
        raise _unavailable(e) from e


def _is_mujoco(env: VecEnv) -> TypeGuard[MujocoVecEnv]:
    try:
        from distrl.envs.mujoco import MujocoVecEnv
    except ImportError:  # without the mujoco extra no env is a MuJoCo one
        return False
    return isinstance(env, MujocoVecEnv)


def make_video_env(
    task: str, max_episode_steps: int | None, device: torch.device
) -> tuple[VecEnv, Frames]:
    """One env of ``task`` that renders, and its frames (``MujocoFrames`` or ``GymFrames``).

    Call ``headless_gl`` first. Raises ValueError for tasks without a renderer.
    """
    from distrl.envs.registry import GYM_PREFIX, get_task

    _import_mujoco()
    if task.startswith(GYM_PREFIX):
        from distrl.envs.gym import GymVecEnv

        env_id = task[len(GYM_PREFIX) :]
        gym_env = GymVecEnv(env_id, 1, device, max_episode_steps, render_mode="rgb_array")
        return gym_env, GymFrames(gym_env)
    env = get_task(task).make_env(1, device, max_episode_steps)
    if hasattr(env, "render_rgb"):
        return env, TorchFrames(env)
    if _is_mujoco(env):
        try:
            return env, MujocoFrames(env)
        except BaseException:
            env.close()
            raise
    env.close()
    raise ValueError(_no_renderer(task))


def _no_renderer(task: str) -> str:
    return (
        f"task {task!r} has no renderer, so --video cannot record it; videos work for cartpole, "
        f"cartpole-novel, acrobot, pendulum, the minatar-* games, the MuJoCo tasks halfcheetah, "
        f"hopper, walker2d and ant, and gym:<Id> tasks whose Gymnasium env renders rgb_array"
    )


def check_filmable(task: str) -> None:
    """Refuse ``--eval.video-interval`` before a run starts when it could not film: no video
    extra, a task without a renderer, or a renderer that does not start here. One env of the
    task is built and one frame rendered, as ``play --video`` would, after ``headless_gl``
    (before anything imports mujoco: it reads ``MUJOCO_GL`` once)."""
    import importlib.util

    from distrl.envs.registry import GYM_PREFIX

    if importlib.util.find_spec("imageio_ffmpeg") is None:
        raise ValueError(f"--eval.video-interval writes mp4 files: {INSTALL_VIDEO}")
    if task.startswith(GYM_PREFIX):
        return  # Gymnasium says at the first video whether its env renders rgb_array
    headless_gl()
    try:
        env, frames = make_video_env(task, None, torch.device("cpu"))
    except ValueError as e:
        raise ValueError(str(e).replace("--video", "--eval.video-interval")) from None
    except RenderUnavailable as e:
        raise ValueError(f"--eval.video-interval: {e}") from None
    try:
        env.reset(seed=0)
        frames.render()
    except RenderUnavailable as e:
        raise ValueError(f"--eval.video-interval: {e}") from None
    finally:
        close = getattr(frames, "close", None)
        if close is not None:
            close()
        env.close()


class Mp4Writer:
    """Streams RGB frames to an H.264 mp4 (the first frame fixes the size); ``frames`` counts."""

    def __init__(self, path: str | Path, fps: float) -> None:
        try:
            import imageio_ffmpeg
        except ImportError as e:
            raise ImportError(f"writing an mp4 needs the video extra: {INSTALL_VIDEO}") from e
        self._write_frames = imageio_ffmpeg.write_frames
        self.path, self.fps, self.frames = Path(path), fps, 0
        self._gen: Generator[None, np.ndarray | None, None] | None = None

    def write(self, frame: np.ndarray) -> None:
        if self._gen is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            height, width = frame.shape[:2]
            # yuv420p needs even sizes: a block of 2 pads an odd side instead of rescaling.
            self._gen = self._write_frames(
                str(self.path), (width, height), fps=self.fps, macro_block_size=2
            )
            self._gen.send(None)
        self._gen.send(np.ascontiguousarray(frame))
        self.frames += 1

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()


def gif_preview(
    path: str | Path, max_side: int = 160, max_frames: int = 250
) -> tuple[bytes, int, int]:
    """(an animated GIF, its height, its width) of the mp4 at ``path``, small enough for a
    TensorBoard event file: every frame shrunk by an integer stride to at most ``max_side``
    pixels a side, and at most ``max_frames`` frames, evenly spread (the GIF plays at the mp4's
    frame rate, so a long episode plays faster). Pillow (a matplotlib dependency) writes it."""
    import io

    import imageio_ffmpeg
    from PIL import Image

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = reader.__next__()
    width, height = meta["size"]
    fps = float(meta.get("fps") or 30.0)
    stride = max(1, -(-max(width, height) // max_side))
    raw = [np.frombuffer(f, np.uint8).reshape(height, width, 3) for f in reader]
    if not raw:
        raise ValueError(f"{path}: no frames")
    keep = np.unique(np.linspace(0, len(raw) - 1, min(len(raw), max_frames)).round().astype(int))
    images = [Image.fromarray(np.ascontiguousarray(raw[i][::stride, ::stride])) for i in keep]
    out = io.BytesIO()
    duration = max(20, round(1000 / fps * len(raw) / len(keep)))  # ms a frame, GIF's floor 20
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:],
                   duration=duration, loop=0)  # fmt: skip
    return out.getvalue(), images[0].height, images[0].width
