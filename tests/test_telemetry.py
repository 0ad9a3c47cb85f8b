"""Tests for distrl.telemetry: run directory files, strict JSON, resume, console output."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from rich.console import Console

from distrl.config import TrainConfig, to_dict
from distrl.telemetry import Telemetry, read_metrics, to_jsonable


def plain_console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=False, width=200), buf


def record(it: int, *, ret: float | None = 100.0, **extra: object) -> dict:
    rec: dict = {
        "iteration": it,
        "env_steps": it * 1024,
        "wall_time": it * 0.5,
        "perf/sps": 2048.0,
        "episode_return_mean": ret,
        "episode_length_mean": 50.0,
        "time/rollout": 0.3,
        "time/learn": 0.2,
        "time/comm": 0.0,
        "time/sync": 0.0,
        "loss/policy": -0.01,
        "loss/value": 1.5,
        "loss/entropy": 0.69,
        "approx_kl": 0.004,
        "clipfrac": 0.1,
        "explained_variance": 0.5,
        "lr": 1e-3,
    }
    rec.update(extra)
    return rec


def make(tmp_path: Path, **kw: object) -> tuple[Telemetry, io.StringIO]:
    console, buf = plain_console()
    kw.setdefault("total_iterations", 10)
    kw.setdefault("tensorboard", False)
    tel = Telemetry.create(tmp_path / "run", to_dict(TrainConfig()), console=console, **kw)
    return tel, buf


def test_disabled_writes_nothing(tmp_path: Path) -> None:
    console, buf = plain_console()
    run = tmp_path / "run"
    with Telemetry.create(
        run, to_dict(TrainConfig()), total_iterations=5, enabled=False, console=console
    ) as tel:
        assert not tel.enabled
        tel.log(record(1))
        tel.message("hello")
        tel.summary({"episode_return_mean": 1.0})
    tel.close()
    assert not run.exists()
    assert buf.getvalue() == ""


def test_config_yaml_round_trips(tmp_path: Path) -> None:
    cfg = to_dict(TrainConfig())
    tel, _ = make(tmp_path)
    tel.close()
    run = tmp_path / "run"
    assert (run / "checkpoints").is_dir()
    text = (run / "config.yaml").read_text()
    loaded = yaml.safe_load(text)
    assert loaded["policy"]["actor_hidden"] == [64, 64]  # tuples written as lists
    assert list(loaded) == list(cfg)  # sort_keys=False keeps the dataclass order
    expected = json.loads(json.dumps(cfg))  # tuples -> lists
    assert loaded == expected


def test_metrics_strict_json(tmp_path: Path) -> None:
    tel, _ = make(tmp_path)
    tel.log(
        record(
            1,
            ret=None,
            **{
                "loss/value": float("nan"),
                "approx_kl": torch.tensor(0.25),
                "clipfrac": np.float32(0.5),
                "dist/staleness": np.int64(3),
                "grad_norm": float("inf"),
                "per_task": {"a": float("-inf"), "b": torch.tensor([1.0, 2.0])},
            },
        )
    )
    tel.log(record(2))
    tel.close()
    path = tmp_path / "run" / "metrics.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 2

    def strict(token: str) -> None:
        raise ValueError(f"non-strict JSON constant {token}")

    first = json.loads(lines[0], parse_constant=strict)
    assert first["episode_return_mean"] is None
    assert first["loss/value"] is None
    assert first["grad_norm"] is None
    assert first["approx_kl"] == 0.25 and isinstance(first["approx_kl"], float)
    assert first["clipfrac"] == 0.5
    assert first["dist/staleness"] == 3 and isinstance(first["dist/staleness"], int)
    assert first["per_task"] == {"a": None, "b": [1.0, 2.0]}
    assert read_metrics(path)[1]["episode_return_mean"] == 100.0
    assert read_metrics(path.parent) == read_metrics(path)


def test_to_jsonable_edge_cases() -> None:
    assert to_jsonable(np.bool_(True)) is True
    assert to_jsonable((1, 2.0, math.nan)) == [1, 2.0, None]
    assert to_jsonable(torch.tensor(3, dtype=torch.int64)) == 3
    assert to_jsonable(torch.ones(2, requires_grad=True) * 2) == [2.0, 2.0]
    assert to_jsonable(Path("a/b")) == "a/b"


def test_metrics_append_across_resume(tmp_path: Path) -> None:
    with make(tmp_path, total_iterations=6)[0] as tel:
        for it in range(1, 4):
            tel.log(record(it))
    path = tmp_path / "run" / "metrics.jsonl"
    # A crash mid-write leaves half a line; the resumed run must not glue onto it.
    with path.open("a") as f:
        f.write('{"iteration": 4, "env_st')
    # Resume from a checkpoint at iteration 2: iteration 3 is redone.
    with make(tmp_path, total_iterations=6, start_iteration=2)[0] as tel:
        for it in range(3, 7):
            tel.log(record(it, ret=float(it)))
    raw = read_metrics(path, dedupe=False)
    assert [r["iteration"] for r in raw] == [1, 2, 3, 3, 4, 5, 6]
    clean = read_metrics(path)
    assert [r["iteration"] for r in clean] == [1, 2, 3, 4, 5, 6]
    assert clean[2]["episode_return_mean"] == 3.0  # the resumed run's record wins


def test_a_writer_that_takes_over_knows_the_newest_whole_record(tmp_path: Path, monkeypatch):
    """``last_iteration`` on opening an existing metrics.jsonl: the newest whole record's,
    past a half-written last line, and from the tail alone when the file is long."""
    assert Telemetry().last_iteration is None  # the null object logs nothing
    with make(tmp_path)[0] as tel:
        assert tel.last_iteration is None  # a new file
        for it in range(1, 4):
            tel.log(record(it))
        assert tel.last_iteration == 3
    with (tmp_path / "run" / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 4, "env_st')  # the writer died mid-line
    with make(tmp_path)[0] as tel:
        assert tel.last_iteration == 3
    monkeypatch.setattr("distrl.telemetry.TAIL_BYTES", 600)  # two records and a bit
    with make(tmp_path)[0] as tel:
        assert tel.last_iteration == 3
        tel.log(record(5))
    with make(tmp_path)[0] as tel:
        assert tel.last_iteration == 5


def test_tensorboard_event_file(tmp_path: Path) -> None:
    tel, _ = make(tmp_path, tensorboard=True)
    tel.log(record(1))
    tel.log(record(2, ret=None))
    tel.close()
    events = list((tmp_path / "run").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "run"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "perf/sps" in tags and "loss/policy" in tags
    rets = acc.Scalars("episode_return_mean")
    assert [e.step for e in rets] == [1024]  # None skipped; x-axis is env_steps


def test_plain_progress_lines(tmp_path: Path) -> None:
    tel, buf = make(tmp_path, total_iterations=100)
    for it in range(1, 101):
        tel.log(record(it, ret=187.25))
    tel.close()
    out = buf.getvalue()
    assert "\x1b" not in out  # no control codes on a non-terminal
    lines = out.splitlines()
    # first iteration, every 100 // 20 = 5, and the last
    assert len(lines) == 1 + 20
    assert lines[0].startswith("it 1/100 | steps 1,024 | sps 2,048 | return 187.2")
    assert lines[-1].startswith("it 100/100 | steps 102,400 |")
    assert " | eta " in lines[-1]
    assert lines[-1].endswith("eta 0:00:00")


def test_progress_disabled(tmp_path: Path) -> None:
    tel, buf = make(tmp_path, progress=False)
    for it in range(1, 11):
        tel.log(record(it))
    tel.message("checkpoint saved [rank 0]")
    tel.close()
    assert buf.getvalue() == "checkpoint saved [rank 0]\n"


def test_live_progress_on_terminal(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160)
    with Telemetry.create(
        tmp_path / "run",
        to_dict(TrainConfig()),
        total_iterations=4,
        tensorboard=False,
        console=console,
    ) as tel:
        for it in range(1, 5):
            tel.log(record(it, ret=42.0))
        tel.message("halfway")
        tel.summary({})
    out = buf.getvalue()
    assert "4/4" in out and "42.0" in out and "halfway" in out


def test_summary_prints_final_return(tmp_path: Path) -> None:
    tel, buf = make(tmp_path, total_iterations=3, progress=False)
    for it in range(1, 4):
        tel.log(record(it, ret=150.0 + it))
    tel.summary({"episode_return_mean": 499.5, "wall_time": 3723.0})
    tel.close()
    out = buf.getvalue()
    assert "499.5" in out
    assert "3/3" in out
    assert "3,072" in out  # env steps
    assert "1:02:03" in out  # wall time
    assert "2,048" in out  # mean SPS
    assert str(tmp_path / "run") in out


def test_context_manager_closes_on_exception(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), make(tmp_path, tensorboard=True)[0] as tel:
        tel.log(record(1))
        raise RuntimeError("boom")
    assert tel._closed  # type: ignore[attr-defined]
    assert tel._metrics is None and tel._writer is None  # type: ignore[attr-defined]
    tel.close()  # idempotent
    with pytest.raises(RuntimeError, match="after close"):
        tel.log(record(2))
    assert len(read_metrics(tmp_path / "run")) == 1


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_wandb_missing_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ImportError, match=r"pip install -c constraints.txt -e '\.\[wandb\]'"):
        make(tmp_path, wandb=True)
    assert not (tmp_path / "run").exists()  # failed before creating anything


def test_wandb_sink_with_fake_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, list] = {"init": [], "log": [], "finish": []}

    class Run:
        def log(self, data: dict, step: int | None = None) -> None:
            calls["log"].append((data, step))

        def finish(self) -> None:
            calls["finish"].append(True)

    fake = types.ModuleType("wandb")
    fake.init = lambda **kw: calls["init"].append(kw) or Run()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", fake)
    with make(tmp_path, wandb=True)[0] as tel:
        tel.log(record(1, ret=None))
    assert calls["init"][0]["config"]["policy"]["actor_hidden"] == [64, 64]
    data, step = calls["log"][0]
    assert step == 1024
    assert "episode_return_mean" not in data and data["perf/sps"] == 2048.0
    assert calls["finish"] == [True]


def test_enabled_without_run_dir_is_an_error() -> None:
    with pytest.raises(ValueError, match="run_dir"):
        Telemetry.create(None, {}, total_iterations=1)


def test_display_keeps_last_known_return(tmp_path: Path) -> None:
    tel, buf = make(tmp_path, total_iterations=2)
    tel.log(record(1, ret=None))
    tel.log(record(2, ret=None))
    tel.close()
    assert "return n/a" in buf.getvalue()

    tel, buf = make(tmp_path, total_iterations=2)
    tel.log(record(1, ret=12.5))
    tel.log(record(2, ret=None))  # no episode finished this iteration
    tel.summary()
    tel.close()
    lines = buf.getvalue().splitlines()
    assert lines[1].startswith("it 2/2") and "return 12.5" in lines[1]
    assert any("final return" in line and "12.5" in line for line in lines)
    assert read_metrics(tmp_path / "run")[-1]["episode_return_mean"] is None  # file stays raw


def test_read_metrics_skips_a_line_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(
        b'{"iteration": 1}\n{"iteration": 2, "note": "\xff\xfe broken"}\n\xc3\n{"iteration": 3}\n'
    )
    assert [r["iteration"] for r in read_metrics(path)] == [1, 3]


def test_two_config_writers_interleaved_do_not_collide(tmp_path: Path, monkeypatch) -> None:
    """A second writer of config.yaml (another process or thread on the same run directory)
    writes while the first is between its write and its rename: each has its own temporary,
    so both renames succeed and no temporary is left."""
    import distrl.telemetry as telemetry_module

    first, _ = make(tmp_path)
    first.close()
    real_replace = os.replace
    temps: list[str] = []

    def replace(src, dst):
        temps.append(Path(src).name)
        if len(temps) == 1:  # the first writer, caught between write and rename
            second, _ = make(tmp_path)
            second.close()
        real_replace(src, dst)

    monkeypatch.setattr(telemetry_module.os, "replace", replace)
    again = Telemetry.create(
        tmp_path / "run",
        to_dict(TrainConfig()),
        console=plain_console()[0],
        total_iterations=10,
        tensorboard=False,
    )
    again.close()
    monkeypatch.undo()
    assert len(temps) == 2 and temps[0] != temps[1], temps
    assert all(str(os.getpid()) in t and t.startswith(".tmp-config.yaml.") for t in temps), temps
    run = tmp_path / "run"
    assert not [p for p in run.iterdir() if "tmp" in p.name]
    assert yaml.safe_load((run / "config.yaml").read_text()) == json.loads(
        json.dumps(to_dict(TrainConfig()))
    )
