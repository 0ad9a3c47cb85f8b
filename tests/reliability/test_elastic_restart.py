"""Elastic restart: `distrl train cartpole --nproc 2 --max-restarts 2 --resume auto` survives a
rank killed with SIGKILL mid-run. torchrun restarts both ranks, they resume from the newest
checkpoint, and the run ends at the same iteration with the same state, bit for bit, as the
uninterrupted run (the session's `two_rank_reference`).

The kill comes from a test-only hook: the run trains ``kill-once-cartpole``, which
tests/fixtures/kill_once.py registers with its hook (``register_task(..., hooks=)``) in the
launcher and in every rank (`distrl train --import tests.fixtures.kill_once`); src/ has no test
hook. The launcher sets
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (distrl.distributed.launch), without which torch 2.13's
Gloo workers were seen to fail to reconnect after a restart.
"""

from __future__ import annotations

import pytest

from distrl.telemetry import read_metrics
from tests.fixtures import kill_once
from tests.helpers import assert_same, final_state
from tests.reliability.conftest import TWO_RANK_ITERS, two_rank_command
from tests.reliability.workers import run_cli

KILL_AT = 5  # rank 1 dies entering the update of iteration 6; the newest checkpoint is 4


@pytest.mark.slow  # a 2-rank launch killed and restarted by torchrun: ~15 s
@pytest.mark.timeout(150)
def test_killed_rank_restarts_from_the_newest_checkpoint_and_matches(two_rank_reference, tmp_path):
    run_dir = tmp_path / "run"
    marker = tmp_path / "killed"
    code, out, err, secs = run_cli(
        kill_once.command(two_rank_command(run_dir)),
        timeout=120,
        DISTRL_TEST_KILL_AT_ITERATION=str(KILL_AT),
        DISTRL_TEST_KILL_RANK="1",
        DISTRL_TEST_KILL_MARKER=str(marker),
    )
    print(f"2-rank run with one SIGKILL and a restart: {secs:.1f} s")
    assert code == 0, out + err
    assert marker.read_text() == f"rank 1 killed at iteration {KILL_AT}\n"
    # torchrun saw the failure: it names the first rank it found dead, the SIGKILLed one, or
    # rank 0, which exits 1 at once with an error naming rank 1 as the peer it lost ...
    assert "exitcode: -9" in err or "rank 1 last seen at iteration" in err, err
    # ... and the first restart worked: with the rendezvous store shared (the variable unset)
    # torch 2.13's restarted Gloo ranks fail in connectFullMesh ("Connection refused") and burn
    # a second restart, which this count catches
    assert err.count("failed (exitcode") == 1, err
    assert "resume: no checkpoint yet in this run directory; starting fresh" in out, out
    assert f"resume: loaded {run_dir}/checkpoints/ckpt_00000004.pt at iteration 4" in out, out
    assert out.count("distrl run summary") == 1, out  # ... and restarted it once

    records = read_metrics(run_dir)
    assert [r["iteration"] for r in records] == list(range(1, TWO_RANK_ITERS + 1))
    # policy, optimizer, LR, iteration, env steps, shuffle RNG and every rank's env and RNG state
    assert_same(
        final_state(run_dir, TWO_RANK_ITERS), final_state(two_rank_reference, TWO_RANK_ITERS)
    )


@pytest.mark.timeout(10)
def test_launcher_binds_to_loopback_and_does_not_share_the_rendezvous_store(monkeypatch):
    from distrl import interrupts
    from distrl.distributed import launch

    seen = {}

    def supervise(cmd, env, *rest):
        seen.update(cmd=cmd, env=env)
        return 0

    monkeypatch.delenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", raising=False)
    monkeypatch.setattr(interrupts, "supervise", supervise)
    assert launch.launch(2, 1, ["train", "cartpole"]) == 0
    cmd = seen["cmd"]
    endpoint = next(a for a in cmd if a.startswith("--rdzv-endpoint="))
    assert endpoint.startswith("--rdzv-endpoint=127.0.0.1:"), cmd
    assert "--local-addr=127.0.0.1" in cmd and "--max-restarts=1" in cmd, cmd
    assert not any("0.0.0.0" in a for a in cmd), cmd
    assert seen["env"]["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    # the launcher hosts the rendezvous store (on loopback); torchrun only joins it
    assert "--rdzv-conf=is_host=false" in cmd, cmd
    assert seen["env"]["GLOO_SOCKET_IFNAME"] == seen["env"]["NCCL_SOCKET_IFNAME"] == "lo"
