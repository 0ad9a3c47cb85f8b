"""``--dist.overlap``: the gradient all-reduce in buckets that start during backward
(``distrl.distributed.overlap``). Two ranks end bitwise where the one flat call ends (through the
real launcher); three agree to float rounding; the buckets, the unused parameters and the
non-finite flag on real Gloo ranks; the strategies it does not compose with are refused before
anything starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from distrl.config import DistConfig, TrainConfig
from distrl.distributed.strategies import check_strategy
from tests.distributed.harness import expect_ok, run_ranks
from tests.distributed.workers import run_cli, small_config
from tests.helpers import BIN, assert_same, final_state

SMALL = ["--env.num-envs", "16", "--agent.num-steps", "16", "--agent.max-iterations", "6"]
QUIET = ["--threads", "1", "--progress", "False", "--tensorboard", "False", "--seed", "7"]
# 0.004 MiB = 1,048 floats: the cartpole policy's 9,155 gradients go out in several buckets
BUCKETS = ["--dist.overlap", "True", "--dist.bucket-mb", "0.004"]


def _train(tmp_path: Path, name: str, nproc: int, flags: list[str]) -> dict:
    run = tmp_path / name
    cmd = [str(BIN / "distrl"), "train", "cartpole", "--nproc", str(nproc), *SMALL, *QUIET]
    cmd += ["--agent.num-minibatches", "4", *flags, "--run-dir", str(run)]
    code, out, err, _ = run_cli(cmd, timeout=200, cwd=tmp_path)
    assert code == 0, out[-3000:] + err[-3000:]
    return final_state(run, 6, nproc)


@pytest.mark.slow
@pytest.mark.long  # 21 s: two 2-rank runs through the launcher
@pytest.mark.timeout(420)
def test_two_ranks_overlapped_end_bitwise_where_one_call_ends(tmp_path):
    """At two ranks every element's sum is a + b however the buffer is cut: the whole state
    (weights, Adam's moments, the adaptive LR, the env and RNG states) is bitwise the same."""
    flat = _train(tmp_path, "flat", 2, [])
    overlapped = _train(tmp_path, "overlap", 2, BUCKETS)
    assert_same(flat, overlapped)


@pytest.mark.slow
@pytest.mark.long  # 30 s: two 3-rank runs on the 2-core machine
@pytest.mark.timeout(600)
def test_three_ranks_overlapped_agree_to_rounding(tmp_path):
    """From three ranks Gloo's ring adds an element's partial sums in an order that depends on
    where the call's chunks fall, so buckets may round differently: the weights after six
    iterations (Adam, adaptive LR) agree within 1e-5 absolute and relative."""
    flat = _train(tmp_path, "flat", 3, [])["policy"]
    overlapped = _train(tmp_path, "overlap", 3, BUCKETS)["policy"]
    assert flat.keys() == overlapped.keys()
    for k in flat:
        torch.testing.assert_close(overlapped[k], flat[k], rtol=1e-5, atol=1e-5, msg=k)


# ---- the buckets on real ranks ---------------------------------------------------------------
class _Learner:
    """The part of a GradientLearner the buckets read: parameters viewing one flat buffer."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Linear(64, 2))
        self.unused = nn.Linear(3, 3)  # never in the loss: its bucket goes out after backward
        lin1, lin2, lin3 = self.net[0], self.net[2], self.net[3]
        self.params = [*lin1.parameters(), *lin2.parameters(), *self.unused.parameters()]
        self.params += [*lin3.parameters()]
        self.started = -1  # the buckets started when backward returned
        self.num_grad = n = sum(p.numel() for p in self.params)
        self.flat = torch.zeros(n + 2)
        self.grads_finite = None
        self.probe = lambda: -1
        offset = 0
        for p in self.params:
            p.grad = self.flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()

    def backward(self, rank: int, nan: bool) -> torch.Tensor:
        self.flat.zero_()
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(rank))
        loss = self.net(x).square().mean()
        if nan:
            loss = loss * torch.tensor(float("nan"))
        loss.backward()
        self.started = self.probe()
        finite = self.grads_finite() if self.grads_finite else torch.isfinite(self.flat).all()
        self.flat[-2] = float(rank + 1)  # a decision scalar
        self.flat[-1] = float(not bool(finite))
        return self.flat


def _buckets_worker(rank: int, world: int) -> dict:
    from distrl.distributed import context
    from distrl.distributed.strategies import AllReduceStrategy

    ctx = context.init(small_config(4, distributed=True))
    plain, overlapped = _Learner(), _Learner()
    one = AllReduceStrategy(ctx)
    over = AllReduceStrategy(ctx, bucket_mb=0.0001)  # 26 floats: about a tensor each
    over.overlap_backward(overlapped, over.bucket_mb)
    buckets = over.buckets
    assert buckets is not None
    overlapped.probe = lambda: buckets.next
    out: dict = {"buckets": buckets.buckets}
    one.allreduce_sum_(plain.backward(rank, nan=False))
    flat = overlapped.backward(rank, nan=False)
    out["started_in_backward"] = overlapped.started
    out["started_by_flush"] = buckets.next
    buckets.reduce_(flat)
    out["same"] = torch.equal(plain.flat, overlapped.flat)
    out["scalars"] = overlapped.flat[-2:].tolist()
    flat = overlapped.backward(rank, nan=rank == 1)  # one rank's gradients are NaN
    buckets.reduce_(flat)
    out["nan_flag"] = float(overlapped.flat[-1])
    overlapped.backward(rank, nan=False)
    try:  # a second backward before the step
        overlapped.net(torch.ones(1, 4)).sum().backward()
        out["second"] = ""
    except RuntimeError as e:
        out["second"] = str(e)
    return out


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_buckets_sum_as_one_call_and_agree_on_nan():
    results, codes, _ = run_ranks(_buckets_worker, 2, timeout=100)
    for out in expect_ok(results, codes, 2):
        # from the last layer: [lin3], [unused, lin2 bias], [lin2 weight], [lin1 bias],
        # [lin1 weight] (the last, out with the scalars)
        sizes = [end - start for start, end in out["buckets"]]
        assert sizes == [130, 12 + 64, 4096, 64, 256], out["buckets"]
        assert out["started_in_backward"] == 1  # lin3's; the unused layer's holds the rest
        assert out["started_by_flush"] == 4  # all but the last, in order, at backward's end
        assert out["same"]
        assert out["scalars"] == [3.0, 0.0]
        assert out["nan_flag"] == 1.0  # the other rank's NaN reaches both: both skip
        assert "second backward" in out["second"]


# ---- what it does not compose with -----------------------------------------------------------
def _cfg(**dist: object) -> TrainConfig:
    return dataclasses.replace(TrainConfig(), dist=DistConfig(**dist))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("strategy", "why"),
    [("elastic", "abandoned safely"), ("ps-bsp", "no all-reduce"), ("ps-asp", "no all-reduce")],
)
def test_overlap_is_refused_where_it_does_not_compose(strategy, why):
    cfg = _cfg(strategy=strategy, overlap=True)
    with pytest.raises(ValueError, match=why):
        check_strategy(cfg, 4)


def test_overlap_with_profile_sync_is_refused():
    cfg = _cfg(overlap=True, profile_sync=True)
    with pytest.raises(ValueError, match="undo the overlap"):
        check_strategy(cfg, 2)


def test_overlap_composes_with_allreduce_and_learner_actor():
    for strategy in ("allreduce", "learner-actor"):
        check_strategy(_cfg(strategy=strategy, overlap=True), 2)
