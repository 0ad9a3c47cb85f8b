"""`distrl export`: the exported file takes the checkpoint policy's actions, for any batch size.

The equivalence that matters: onnxruntime (or torch.jit) running the file gives exactly the
deterministic actions of the checkpoint (discrete) or the same within 1e-5 (continuous), with
the observation normalizer baked in; and the built-in check does fail on a file that disagrees.
"""

from __future__ import annotations

import importlib.util
import json
import warnings

import pytest
import torch
from torch import nn

import distrl
from distrl import exporting
from distrl.policy import networks
from tests.helpers import api_train, run_main

pytestmark = pytest.mark.timeout(120)

needs_onnx = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None,
    reason="needs the export extra: pip install -c constraints.txt -e '.[export]'",
)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cartpole")
    return run_dir, api_train("cartpole", run_dir).policy


@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("pendulum")
    return run_dir, api_train("pendulum", run_dir).policy


def _run_file(path, obs: torch.Tensor) -> torch.Tensor:
    if path.suffix == ".onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return torch.from_numpy(session.run(None, {"obs": obs.numpy()})[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.load, as of torch 2.13
        return torch.jit.load(str(path))(obs)


def _far_and_near(obs_dim: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    obs = torch.randn(n, obs_dim, generator=g)
    obs[: n // 4] *= 50.0  # far outside training: the baked-in normalizer must clip as ours does
    return obs


@pytest.mark.parametrize(
    "fmt", [pytest.param("onnx", marks=needs_onnx), pytest.param("torchscript")]
)
def test_discrete_export_takes_the_checkpoint_actions_at_any_batch_size(cartpole_run, fmt):
    run_dir, policy = cartpole_run
    result = distrl.export(run_dir, fmt)
    assert result.path == run_dir / "exported" / f"policy{exporting.SUFFIX[fmt]}"
    assert result.max_abs_diff == 0.0
    assert result.checked_with == ("onnxruntime" if fmt == "onnx" else "torch.jit")
    assert policy.normalizer.count > 0  # the normalizer is not the identity
    for n in (1, 7, 1000):
        obs = _far_and_near(4, n)
        theirs = _run_file(result.path, obs)
        assert theirs.dtype == torch.int64 and theirs.shape == (n,)
        assert torch.equal(theirs, policy.act_deterministic(obs))


@pytest.mark.parametrize(
    "fmt", [pytest.param("onnx", marks=needs_onnx), pytest.param("torchscript")]
)
def test_continuous_export_matches_to_1e_5_and_clips_to_the_bounds(pendulum_run, tmp_path, fmt):
    run_dir, policy = pendulum_run
    out = tmp_path / f"pendulum{exporting.SUFFIX[fmt]}"
    result = distrl.export(run_dir, fmt, out)
    assert result.path == out and result.max_abs_diff is not None
    assert result.max_abs_diff <= 1e-5
    obs = _far_and_near(3, 500)
    theirs = _run_file(out, obs)
    ours = policy.act_deterministic(obs).detach()
    assert theirs.shape == ours.shape == (500, 1)
    assert float((theirs - ours).abs().max()) <= 1e-5
    assert float(theirs.abs().max()) <= 2.0 + 1e-6  # Pendulum's torque bound


@pytest.mark.parametrize(
    "fmt", [pytest.param("onnx", marks=needs_onnx), pytest.param("torchscript")]
)
def test_metadata_in_the_file_and_beside_it(cartpole_run, tmp_path, fmt):
    run_dir, _ = cartpole_run
    result = distrl.export(run_dir, fmt, tmp_path / f"p{exporting.SUFFIX[fmt]}")
    inside = exporting.read_metadata(result.path)
    beside = json.loads(result.metadata_path.read_text())
    assert beside.pop("parity")["max_abs_diff"] == 0.0
    assert inside == beside
    assert inside["task"] == "cartpole" and inside["distrl_version"] == distrl.__version__
    assert inside["iteration"] == 2 and inside["checkpoint"].endswith("ckpt_00000002.pt")
    assert inside["input"] == {"name": "obs", "shape": ["batch", 4], "dtype": "float32"}
    assert inside["output"]["type"] == "discrete" and inside["output"]["n"] == 2


def test_the_parity_check_fails_on_a_file_that_disagrees(cartpole_run, tmp_path):
    """The check is not a formality: a file exported from other weights is refused."""
    run_dir, policy = cartpole_run
    result = distrl.export(run_dir, "torchscript", tmp_path / "p.pt")
    other = exporting.DeterministicActor(policy).policy
    with torch.no_grad():
        other.actor[-1].bias += torch.tensor([5.0, -5.0])  # always action 0
    with pytest.raises(exporting.ParityError, match="another action than the checkpoint"):
        exporting._parity(other, result.path, "torchscript")


def test_a_registered_network_exports(tmp_path):
    saved = dict(networks._NETWORKS)
    try:
        distrl.register_network(
            "ln", actor=lambda o, a: nn.Sequential(nn.Linear(o, 32), nn.LayerNorm(32),
                                                   nn.ELU(), nn.Linear(32, a)),
            critic=lambda o: nn.Linear(o, 1),
        )  # fmt: skip
        policy = api_train("pendulum", tmp_path, policy={"network": "ln"}).policy
        result = distrl.export(tmp_path, "torchscript")
        obs = _far_and_near(3, 64)
        ours = policy.act_deterministic(obs).detach()
        assert float((_run_file(result.path, obs) - ours).abs().max()) < 1e-5
        assert result.metadata["network"] == "ln"
    finally:
        networks._NETWORKS.clear()
        networks._NETWORKS.update(saved)


def test_cli_export_and_its_mistakes(cartpole_run, tmp_path, capsys, monkeypatch):
    run_dir, _ = cartpole_run
    out = tmp_path / "cli.pt"
    code, stdout, _ = run_main(
        ["export", str(run_dir), "--format", "torchscript", "--output", str(out)], capsys
    )
    assert code == 0 and out.is_file()
    assert "cartpole: exported torchscript" in stdout and "matches the checkpoint" in stdout

    cases = [
        (["export", str(tmp_path / "nope")], "no such run directory or checkpoint"),
        (["export", str(tmp_path)], "no checkpoint"),
        (["export", str(run_dir), "--format", "torchscript", "--output", "x.onnx"], "end in .pt"),
    ]
    for argv, message in cases:
        code, _, stderr = run_main(argv, capsys)
        assert code == 2 and message in stderr and "Traceback" not in stderr, (argv, stderr)

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "onnx" else real(name, *a)
    )
    code, _, stderr = run_main(["export", str(run_dir), "--format", "onnx"], capsys)
    assert code == 2 and "pip install -c constraints.txt -e '.[export]'" in stderr


@pytest.mark.parametrize(
    "fmt", [pytest.param("onnx", marks=needs_onnx), pytest.param("torchscript")]
)
def test_a_recurrent_policy_exports_with_its_memory_in_and_out(tmp_path, fmt):
    """The file takes (obs, memory) and returns (action, memory_out); fed its own memory back
    over an episode-long sequence it takes the checkpoint's actions, step for step."""
    policy = api_train("cartpole-novel", tmp_path).policy
    result = distrl.export(tmp_path, fmt)
    assert result.metadata["memory"]["shape"] == ["batch", 2, 64]
    n, g = 16, torch.Generator().manual_seed(0)
    ours_memory = policy.initial_memory(n)
    theirs_memory = torch.zeros(n, 2, 64)
    for step in range(50):
        obs = 0.1 * torch.randn(n, 2, generator=g)
        if fmt == "onnx":
            import onnxruntime

            session = onnxruntime.InferenceSession(
                str(result.path), providers=["CPUExecutionProvider"]
            )
            out = session.run(None, {"obs": obs.numpy(), "memory": theirs_memory.numpy()})
            action, theirs_memory = (torch.from_numpy(a) for a in out)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                action, theirs_memory = torch.jit.load(str(result.path))(obs, theirs_memory)
        with torch.no_grad():
            assert torch.equal(action, policy.act_deterministic(obs, ours_memory)), step
        torch.testing.assert_close(theirs_memory, ours_memory, atol=1e-5, rtol=1e-5)
