"""A parameter server's sink nodes (``--dist.ps.group-size``): who talks to whom, BSP with
sinks equal to BSP without them on the same data (through the real launcher), a resume that
continues bit for bit, ASP and BAP across sinks, a lost worker of a sink dropped by name, and
the refusals of a group size that does not fit."""

from __future__ import annotations

import pickle

import pytest
import torch

from distrl.config import DistConfig, PSConfig
from distrl.distributed.param_server import Tree, mean_gradient, tree_error
from distrl.distributed.ps_sink import stack_rows
from distrl.distributed.strategies import check_strategy
from tests.distributed.harness import expect_ok, run_ranks
from tests.distributed.workers import ps_run, run_cli
from tests.helpers import BIN, assert_same, final_state

SMALL = ["--env.num-envs", "8", "--agent.num-steps", "16", "--agent.save-interval", "2"]
QUIET = ["--threads", "1", "--progress", "False", "--tensorboard", "False", "--seed", "7"]


def test_the_tree_puts_a_sink_at_the_head_of_every_group_but_rank_0s():
    t = Tree(world=9, group=3)
    assert t.sinks == [3, 6]
    assert t.workers == [1, 2, 4, 5, 7, 8]
    assert t.server_peers == [1, 2, 3, 6]
    assert t.members(3) == [4, 5] and t.members(6) == [7, 8]
    assert [t.parent(r) for r in range(1, 9)] == [0, 0, 0, 3, 3, 0, 6, 6]
    assert "sink node 3 for workers [4, 5]" in t.describe()
    flat = Tree(world=4)
    assert flat.sinks == [] and flat.workers == [1, 2, 3] and flat.server_peers == [1, 2, 3]
    assert {flat.parent(r) for r in range(1, 4)} == {0}


def test_a_group_size_that_does_not_fit_the_world_is_refused_naming_the_fix():
    assert tree_error(0, 3) is None and tree_error(3, 6) is None
    assert "--nproc 6" in str(tree_error(3, 5))
    assert "at least 6" in str(tree_error(3, 3))

    def cfg(world_strategy: str, group: int):
        from tests.distributed.workers import small_config

        c = small_config(8, distributed=True)
        import dataclasses

        return dataclasses.replace(
            c, dist=DistConfig(strategy=world_strategy, ps=PSConfig(group_size=group))
        )

    with pytest.raises(ValueError, match="multiple of 3"):
        check_strategy(cfg("ps-bsp", 3), 7)
    with pytest.raises(ValueError, match=r"does not read --dist.ps.group-size 3 \(read by ps-bsp"):
        check_strategy(cfg("allreduce", 3), 6)
    check_strategy(cfg("ps-asp", 3), 9)


def test_a_sinks_gradient_is_its_workers_sample_weighted_mean():
    g = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 6.0])]
    assert torch.equal(mean_gradient([(g[0], 4), (g[1], 4)]), torch.tensor([2.0, 4.0]))
    assert torch.equal(mean_gradient([(g[0], 1), (g[1], 3)]), torch.tensor([2.5, 5.0]))
    # a group's mean of its summed samples, then the server's mean over groups, is the mean
    # over every worker
    both = mean_gradient([(mean_gradient([(g[0], 4), (g[1], 4)]), 8), (g[0], 4)])
    flat = mean_gradient([(g[0], 4), (g[1], 4), (g[0], 4)])
    torch.testing.assert_close(both, flat)


def test_stacked_rows_carry_their_ranks_in_order():
    rows = {5: torch.tensor([1.0, 2.0], dtype=torch.float64), 4: torch.tensor([3.0, 4.0])}
    flat = stack_rows({k: v.double() for k, v in rows.items()})
    assert flat.tolist() == [4.0, 5.0, 3.0, 4.0, 1.0, 2.0]


def train(tmp_path, name: str, *flags: str, iters: int = 4) -> None:
    cmd = [str(BIN / "distrl"), "train", "cartpole", *flags, *SMALL, *QUIET]
    cmd += ["--agent.max-iterations", str(iters), "--run-dir", str(tmp_path / name)]
    code, out, err, _ = run_cli(cmd, timeout=200, cwd=tmp_path)
    assert code == 0, out[-3000:] + err[-3000:]
    return out + err


SINKS = ("--nproc", "6", "--dist.strategy", "ps-bsp", "--dist.ps.group-size", "3")


@pytest.mark.long  # two launches of 5 and 6 ranks: ~30 s
@pytest.mark.timeout(420)
def test_bsp_with_a_sink_node_ends_where_flat_bsp_does_on_the_same_data(tmp_path):
    """Rank 0 with workers 1, 2 and sink 3 with workers 4, 5 against rank 0 with workers
    1..4: the same four workers' data (a sink seeds none), the same sums grouped otherwise."""
    said = train(tmp_path, "sinks", *SINKS)
    assert "rank 0 serves workers [1, 2] and sink node 3 for workers [4, 5]" in said
    train(tmp_path, "flat", "--nproc", "5", "--dist.strategy", "ps-bsp")
    sinks, flat = final_state(tmp_path / "sinks", 4, 6), final_state(tmp_path / "flat", 4, 5)
    worst = max(float((sinks["policy"][k] - flat["policy"][k]).abs().max()) for k in flat["policy"])
    assert worst <= 1e-5, f"max |sinks - flat| = {worst}"
    assert sinks["env_steps"] == flat["env_steps"] == 4 * 4 * 8 * 16
    # every worker's state is in the checkpoint under its own rank; the sink holds none
    states = sinks["ranks"]
    assert states[0] == {} and states[3] == {}
    assert_same(states[4]["rng"], flat["ranks"][3]["rng"], "worker 4 as flat worker 3")


@pytest.mark.long  # three launches of 6 ranks: ~45 s
@pytest.mark.timeout(420)
def test_a_run_with_sink_nodes_resumes_bit_for_bit(tmp_path):
    train(tmp_path, "full", *SINKS)
    train(tmp_path, "part", *SINKS, iters=2)
    train(tmp_path, "part", *SINKS, "--resume", "auto")
    assert_same(final_state(tmp_path / "full", 4, 6), final_state(tmp_path / "part", 4, 6))


def sink_run(tmp_path, mode: str, agent: dict, fault: dict | None = None, **ps):
    dist = dict(strategy=f"ps-{mode}", timeout=20.0, ps=dict(group_size=3, **ps))
    results, codes, _ = run_ranks(ps_run, 6, str(tmp_path), dist, agent, fault or {}, timeout=150)
    return results, codes


def server_output(results) -> tuple[list[dict], str]:
    assert results[0][0] == "ok", results[0][1]
    got = pickle.loads(results[0][1])
    return got["records"], got["stdout"]


@pytest.mark.long  # 6 ranks: ~15 s each
@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", ["asp", "bap"])
def test_asp_and_bap_run_across_sink_nodes_with_every_workers_steps(tmp_path, mode):
    extra = dict(lifetime=30.0) if mode == "bap" else {}
    results, codes = sink_run(tmp_path, mode, dict(max_iterations=3), **extra)
    expect_ok(results, codes, 6)
    recs, _ = server_output(results)
    assert recs[-1]["iteration"] == 3 and recs[-1]["dist/workers"] == 4
    assert recs[-1]["env_steps"] == 3 * 4 * 8 * 16  # four workers x 16 envs x 8 steps
    if mode == "asp":  # one version per gradient of each of the server's 3 peers
        assert recs[-1]["dist/version"] == 3 * 3 * 3 * 4  # peers x iterations x epochs x mbs


@pytest.mark.long  # ~25 s
@pytest.mark.timeout(200)
def test_a_dead_worker_of_a_sink_is_dropped_by_name_and_training_finishes(tmp_path):
    results, codes = sink_run(tmp_path, "asp", dict(max_iterations=6), dict(kill_worker=(5, 2)))
    assert codes[5] == -9, (codes, results.get(5))
    assert all(codes[r] == 0 for r in (0, 1, 2, 3, 4)), (codes, results)
    recs, _ = server_output(results)
    assert recs[-1]["iteration"] == 6 and recs[-1]["dist/workers"] == 3, recs[-1]
