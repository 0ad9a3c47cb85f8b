"""`distrl play RUN --video out.mp4`: one deterministic episode rendered offscreen to an mp4.

Training runs in this process; `play --video` runs in a fresh interpreter, as a user starts it,
because mujoco reads MUJOCO_GL once, at its first import, and this process imported mujoco while
collecting other tests: only a fresh process shows that `play` picks a headless backend itself.
A machine without headless OpenGL skips, naming the system package (play's own error says it).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from distrl.play import PlayArgs, play
from distrl.telemetry import read_metrics
from tests.helpers import run_main, tiny_train_args

imageio_ffmpeg = pytest.importorskip(
    "imageio_ffmpeg", reason="needs the video extra: pip install -c constraints.txt -e '.[video]'"
)
pytest.importorskip("mujoco", reason="needs the mujoco extra (make setup-mujoco)")

STEPS = 10  # episode length: neither HalfCheetah terminates, so every episode has 10 frames
SEED = 7


def _train(task: str, run_dir: Path, capsys) -> None:
    args = tiny_train_args(4, num_steps=16, num_epochs=1, num_minibatches=2)
    args += ["--agent.max-iterations", "2", "--env.max-episode-steps", str(STEPS)]
    code, out, err = run_main(["train", task, *args, "--run-dir", str(run_dir)], capsys)
    assert code == 0, out + err


def _play_video(run_dir: Path, video: Path) -> str:
    """stdout of `distrl play RUN --video VIDEO` in a new interpreter; skips without OpenGL."""
    cmd = [sys.executable, "-m", "distrl.cli", "play", str(run_dir), "--video", str(video)]
    proc = subprocess.run([*cmd, "--seed", str(SEED)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and "could not render offscreen" in proc.stderr:
        pytest.skip(proc.stderr.strip())  # names the package to install and MUJOCO_GL
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow  # trains, then renders and encodes in a fresh interpreter: ~5 s each
@pytest.mark.parametrize("task", ["halfcheetah", "gym:HalfCheetah-v5"])
def test_video_is_one_episode_with_the_evaluated_return(task, tmp_path, capsys):
    run_dir, video = tmp_path / "run", tmp_path / "out" / "episode.mp4"
    _train(task, run_dir, capsys)

    out = _play_video(run_dir, video)
    m = re.search(r"video (\S+), (\d+) frames at 20 fps, return (-?[\d.]+) \(seed 7,", out)
    assert m, out
    assert m.group(1) == str(video) and int(m.group(2)) == STEPS

    # a valid mp4 of exactly one frame per step of the episode
    assert video.stat().st_size > 0
    frames, seconds = imageio_ffmpeg.count_frames_and_secs(str(video))
    assert frames == STEPS and seconds == pytest.approx(STEPS / 20, abs=0.06)
    reader = imageio_ffmpeg.read_frames(str(video))
    assert next(reader)["size"] == (480, 480)
    reader.close()

    # the printed return is what evaluating that env and seed gives, without rendering
    returns = play(PlayArgs(str(run_dir), episodes=1, num_envs=1, seed=SEED))
    assert m.group(3) == f"{float(returns[0]):.2f}"


@pytest.mark.parametrize("task", ["cartpole", "acrobot", "pendulum", "minatar-breakout"])
def test_built_in_torch_tasks_are_filmed(task, tmp_path, capsys, monkeypatch):
    """The built-in envs draw themselves (``render_rgb``, numpy): one episode, one frame per
    step at the env's rate, the printed return that of the same seed without rendering."""
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    run_dir, video = tmp_path / "run", tmp_path / "episode.mp4"
    code, out, err = run_main(
        ["train", task, *tiny_train_args(4, num_steps=16, num_epochs=1, num_minibatches=2)]
        + ["--agent.max-iterations", "1", "--env.max-episode-steps", "12"]
        + ["--run-dir", str(run_dir)],
        capsys,
    )
    assert code == 0, out + err
    code, out, err = run_main(["play", str(run_dir), "--video", str(video), "--seed", "3"], capsys)
    assert code == 0, out + err
    m = re.search(r"video \S+, (\d+) frames at ([\d.]+) fps, return (-?[\d.]+)", out)
    assert m, out
    frames, _ = imageio_ffmpeg.count_frames_and_secs(str(video))
    assert frames == int(m.group(1)) and 1 <= frames <= 12
    returns = play(PlayArgs(str(run_dir), episodes=1, num_envs=1, seed=3))
    assert m.group(3) == f"{float(returns[0]):.2f}"


def test_the_pictures_follow_the_state():
    import numpy as np
    import torch

    from distrl.envs.registry import get_task

    cart = get_task("cartpole").make_env(1, torch.device("cpu"), None)
    cart.reset(seed=0)
    columns = []
    for x in (-1.0, 1.0):
        cart.state[0] = torch.tensor([x, 0.0, 0.0, 0.0], dtype=cart.state.dtype)
        black = np.argwhere((cart.render_rgb()[260:300] == 0).all(axis=2))
        columns.append(black[:, 1].mean())
    assert columns[1] - columns[0] == pytest.approx(2 * 125, abs=2)  # 125 px per unit
    pendulum = get_task("pendulum").make_env(1, torch.device("cpu"), None)
    pendulum.reset(seed=0)
    rows = []
    for th in (0.0, np.pi):  # upright, then hanging
        pendulum.state[0, 0] = th
        red = np.argwhere((pendulum.render_rgb() == (204, 77, 77)).all(axis=2))
        rows.append(red[:, 0].mean())
    assert rows[0] < 250 < rows[1]


def test_tasks_without_a_renderer_are_refused_by_name(tmp_path, capsys, monkeypatch):
    from distrl.envs.cartpole import CartPole

    monkeypatch.delenv("MUJOCO_GL", raising=False)  # play sets it; restored after the test
    monkeypatch.delattr(CartPole, "render_rgb")  # as a task without a renderer
    run_dir = tmp_path / "run"
    code, out, err = run_main(
        ["train", "cartpole", *tiny_train_args(4), "--agent.max-iterations", "1"]
        + ["--run-dir", str(run_dir)],
        capsys,
    )
    assert code == 0, out + err
    code, _, err = run_main(["play", str(run_dir), "--video", str(tmp_path / "v.mp4")], capsys)
    assert code == 2
    assert "'cartpole' has no renderer" in err and "halfcheetah" in err and "gym:" in err
    assert not (tmp_path / "v.mp4").exists()

    code, _, err = run_main(["play", str(run_dir), "--video", "v.mp4", "--episodes", "3"], capsys)
    assert code == 2 and "one episode" in err
    code, _, err = run_main(["play", str(run_dir), "--video", "v.gif"], capsys)
    assert code == 2 and ".mp4" in err


def test_training_films_an_episode_every_video_interval(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, out, err = run_main(
        ["train", "cartpole", *tiny_train_args(4, num_steps=16, num_epochs=1, num_minibatches=2)]
        + ["--agent.max-iterations", "3", "--env.max-episode-steps", "20"]
        + ["--eval.video-interval", "2", "--run-dir", str(run_dir)],
        capsys,
    )
    assert code == 0, out + err
    videos = sorted((run_dir / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["iteration_00000002.mp4", "iteration_00000003.mp4"]
    filmed = [r for r in read_metrics(run_dir) if "eval/video" in r]
    assert [r["iteration"] for r in filmed] == [2, 3]
    for r, v in zip(filmed, videos, strict=True):
        assert r["eval/video"] == str(v)
        frames, _ = imageio_ffmpeg.count_frames_and_secs(str(v))
        assert frames == r["eval/video_return"]  # cartpole: +1 a step, one frame a step


def test_the_filmed_episode_is_an_animated_image_in_tensorboard(tmp_path, capsys):
    """TensorBoard shows each filmed episode as a GIF under eval/video, one frame per frame of
    the mp4 (a short episode keeps them all), at the record's env steps."""
    import io

    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    args = tiny_train_args(4, num_steps=16, num_epochs=1, num_minibatches=2)
    args[args.index("--tensorboard") + 1] = "True"
    code, out, err = run_main(
        ["train", "cartpole", *args, "--agent.max-iterations", "2"]
        + ["--env.max-episode-steps", "20", "--eval.video-interval", "2"]
        + ["--run-dir", str(run_dir)],
        capsys,
    )
    assert code == 0, out + err
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    events.Reload()
    (shown,) = events.Images("eval/video")
    gif = Image.open(io.BytesIO(shown.encoded_image_string))
    mp4 = run_dir / "videos" / "iteration_00000002.mp4"
    assert gif.format == "GIF" and (shown.height, shown.width) == (gif.height, gif.width)
    assert gif.n_frames == imageio_ffmpeg.count_frames_and_secs(str(mp4))[0]
    assert max(gif.size) <= 160 and shown.step == read_metrics(run_dir)[-1]["env_steps"]


def test_video_interval_is_refused_before_start_where_it_could_not_film(tmp_path, capsys):
    code, _, err = run_main(["train", "reach10", "--eval.video-interval", "5"], capsys)
    assert code == 2 and "'reach10' has no renderer" in err and "--eval.video-interval" in err


@pytest.mark.slow  # a fresh interpreter: mujoco reads MUJOCO_GL once, at its first import
def test_training_films_mujoco_headless_with_mujoco_gl_unset(tmp_path):
    """The check before the run built an env (importing mujoco) before MUJOCO_GL was chosen,
    so the first video died without a display and took the run with it: now the check picks
    the backend first and renders a frame, and the run films."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY")}
    run_dir = tmp_path / "run"
    args = tiny_train_args(2, num_steps=8, num_epochs=1, num_minibatches=1)
    cmd = [sys.executable, "-m", "distrl.cli", "train", "halfcheetah", *args]
    cmd += ["--agent.max-iterations", "1", "--env.max-episode-steps", "5"]
    cmd += ["--eval.video-interval", "1", "--run-dir", str(run_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    if proc.returncode == 2 and "could not render offscreen" in proc.stderr:
        pytest.skip(proc.stderr.strip())  # no headless OpenGL here: refused before the run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (run_dir / "videos" / "iteration_00000001.mp4").is_file(), proc.stdout[-2000:]


def test_a_video_that_fails_mid_run_is_said_and_the_run_goes_on(tmp_path, capsys, monkeypatch):
    from distrl import evaluation, render

    def broken(*args, **kwargs):
        raise render.RenderUnavailable("the GPU driver went away")

    monkeypatch.setattr(evaluation, "film", broken)
    run_dir = tmp_path / "run"
    code, out, err = run_main(
        ["train", "cartpole", *tiny_train_args(4, num_steps=16, num_epochs=1, num_minibatches=2)]
        + ["--agent.max-iterations", "2", "--eval.video-interval", "1", "--run-dir", str(run_dir)],
        capsys,
    )
    assert code == 0, out + err
    assert "video: iteration 1 not filmed (RenderUnavailable: the GPU driver went away)" in out
    assert [r["iteration"] for r in read_metrics(run_dir)] == [1, 2]
