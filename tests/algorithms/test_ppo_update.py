"""PPO.update on a hand-built rollout: flat gradient buffer, combined gradients, NaN skips,
target-KL early stop and the adaptive learning rate."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from distrl.algorithms.ppo import PPO, LocalStep, NonFiniteError, all_finite
from distrl.config import AgentConfig, PolicyConfig
from distrl.envs.core import ActionSpace
from distrl.policy.actor_critic import ActorCritic
from distrl.storage.rollout import RolloutBuffer, minibatch_indices

T, N, OBS_DIM = 4, 8, 3
CPU = torch.device("cpu")
BASE = AgentConfig(
    num_steps=T, num_epochs=2, num_minibatches=2, lr_schedule="constant", learning_rate=1e-3
)


def policy(seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(
        OBS_DIM, ActionSpace("discrete", n=2), PolicyConfig(actor_hidden=(16,), critic_hidden=(16,))
    )


def make_buffer(pol: ActorCritic | None = None, seed: int = 1, num_envs: int = N) -> RolloutBuffer:
    """Random rollout; old log-probs from ``pol`` (ratio 1 at the start) when given."""
    g = torch.Generator().manual_seed(seed)
    buf = RolloutBuffer(T, num_envs, OBS_DIM, (), True, CPU)
    buf.obs.copy_(torch.randn(T, num_envs, OBS_DIM, generator=g))
    buf.actions.copy_(torch.randint(0, 2, (T, num_envs), generator=g))
    buf.values.copy_(torch.randn(T, num_envs, generator=g))
    buf.advantages.copy_(torch.randn(T, num_envs, generator=g))
    buf.returns.copy_(buf.advantages + buf.values)
    if pol is None:
        buf.logprobs.copy_(-torch.rand(T, num_envs, generator=g) * 2)
    else:
        with torch.no_grad():
            lp, _, _ = pol.evaluate(buf.obs.view(-1, OBS_DIM), buf.actions.view(-1))
        buf.logprobs.copy_(lp.view(T, num_envs))
    return buf


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def params(pol: ActorCritic) -> list[torch.Tensor]:
    return [p.detach().clone() for p in pol.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


class Doubling:
    """Two ranks with identical data: every sum over ranks is the tensor plus itself."""

    def __init__(self) -> None:
        self.calls = 0

    def combine(self, tensor: torch.Tensor) -> None:
        self.calls += 1
        tensor.add_(tensor)

    def step(self, learner: PPO, flat: torch.Tensor):
        self.combine(flat)
        flat.div_(2)
        return LocalStep().step(learner, flat)


def update(
    ppo: PPO,
    buf: RolloutBuffer,
    g: torch.Generator,
    dist: Doubling | None = None,
    blocks: int = 1,
) -> dict:
    """What a rank does around ``PPO.update``: global batch statistics, then the update with
    this rank's shuffle (``blocks`` > 1: one process standing in for several ranks)."""
    sums = PPO.batch_sums(buf)
    if dist is not None:
        dist.combine(sums)

    def shuffle() -> list[torch.Tensor]:
        return minibatch_indices(buf.num_steps, buf.num_envs, ppo.cfg.num_minibatches, g, blocks)

    return ppo.update(buf, PPO.batch_stats(sums), shuffle, dist)


def assert_grads_are_views(ppo: PPO) -> None:
    base = ppo.flat.data_ptr()
    end = base + ppo.flat.numel() * ppo.flat.element_size()
    offset = 0
    for p in ppo.params:
        assert p.grad is not None
        assert p.grad.untyped_storage().data_ptr() == ppo.flat.untyped_storage().data_ptr()
        assert base <= p.grad.data_ptr() < end
        # laid out back to back, in parameter order, before the scalar tail
        assert p.grad.data_ptr() == base + offset * ppo.flat.element_size()
        assert p.grad.is_contiguous() and p.grad.shape == p.shape
        offset += p.numel()
    assert offset == ppo.num_grad
    assert ppo.flat.numel() == ppo.num_grad + 6


def test_grads_are_views_into_flat_buffer() -> None:
    pol = policy()
    ppo = PPO(pol, BASE)
    assert ppo.params == [p for p in pol.parameters() if p.requires_grad]
    assert_grads_are_views(ppo)
    buf = make_buffer()
    g = gen()
    before = params(pol)
    for _ in range(3):
        m = update(ppo, buf, g)
        assert m["train/updates"] == 4 and m["train/skipped_updates"] == 0
        assert m["train/early_stop"] == 0.0
        assert_grads_are_views(ppo)
    assert not same(before, params(pol))
    # the flat buffer holds the last (clipped) gradients: writing it is visible through p.grad
    ppo.flat.zero_()
    assert all(float(p.grad.abs().sum()) == 0.0 for p in ppo.params)


def test_backward_writes_into_flat() -> None:
    pol = policy()
    ppo = PPO(pol, BASE)
    obs = torch.randn(6, OBS_DIM)
    pol.value(obs).sum().backward()
    assert float(ppo.flat[: ppo.num_grad].abs().sum()) > 0.0
    critic_w = pol.critic[0].weight
    assert critic_w.grad.data_ptr() >= ppo.flat.data_ptr()
    torch.testing.assert_close(
        ppo.flat[: ppo.num_grad].norm(),
        torch.cat([p.grad.reshape(-1) for p in ppo.params]).norm(),
    )


def test_grad_norm_clipping_acts_on_views() -> None:
    cfg = dataclasses.replace(BASE, max_grad_norm=1e-3)
    ppo = PPO(policy(), cfg)
    update(ppo, make_buffer(), gen())
    total = torch.cat([p.grad.reshape(-1) for p in ppo.params]).norm()
    assert float(total) <= 1e-3 * (1 + 1e-5)
    assert float(total) > 0.0


def test_doubling_equals_local_without_adv_norm() -> None:
    # Identical data on two ranks: sum then divide by 2 gives back each rank's gradient exactly
    # (x + x and / 2 are exact), so the parameters are bit-identical. With norm_adv=False the
    # global advantage statistics play no role (the unbiased std depends on the global count).
    cfg = dataclasses.replace(BASE, norm_adv=False)
    pa, pb = policy(), policy()
    buf = make_buffer()
    local = PPO(pa, cfg)
    red = Doubling()
    dbl = PPO(pb, cfg)
    ga, gb = gen(5), gen(5)
    for _ in range(2):
        ma = update(local, buf, ga)
        mb = update(dbl, buf, gb, red)
        assert ma == mb
    assert same(params(pa), params(pb))
    assert red.calls == 2 * (1 + 4)  # one for the global stats + one per minibatch, per update


def test_doubling_equals_local_on_duplicated_envs() -> None:
    # With advantage normalization, two ranks holding the same N envs form the same global batch
    # as one process holding both copies (2N envs) and shuffling with blocks=2.
    cfg = BASE
    pa, pb = policy(), policy()
    buf = make_buffer()
    dup = RolloutBuffer(T, 2 * N, OBS_DIM, (), True, CPU)
    for name in ("obs", "actions", "logprobs", "values", "advantages", "returns"):
        getattr(dup, name).copy_(torch.cat([getattr(buf, name)] * 2, dim=1))
    one = PPO(pa, cfg)
    two = PPO(pb, cfg)
    dbl = Doubling()
    ga, gb = gen(9), gen(9)
    for _ in range(2):
        ma = update(one, dup, ga, blocks=2)
        mb = update(two, buf, gb, dbl)
        assert ma.keys() == mb.keys()
        for k in ma:
            assert ma[k] == pytest.approx(mb[k], rel=1e-5, abs=1e-7), k
    for x, y in zip(params(pa), params(pb), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [1, 2, 63, 4096, 100_003])
def test_all_finite_reads_as_isfinite_all(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g) * 1e30
    assert bool(all_finite(x)) and all_finite(x).dtype == torch.bool
    for bad in (float("nan"), float("inf"), -float("inf")):
        for pos in {0, n // 2, n - 1}:
            y = x.clone()
            y[pos] = bad
            assert not bool(all_finite(y)), (bad, pos)
            assert bool(all_finite(y)) == bool(torch.isfinite(y).all())
    assert bool(all_finite(torch.empty(0)))


def test_nan_advantage_skips_only_its_minibatch() -> None:
    # norm_adv=False: one NaN advantage poisons exactly the minibatch holding it, once per epoch.
    cfg = dataclasses.replace(BASE, norm_adv=False)
    pol = policy()
    ppo = PPO(pol, cfg)
    buf = make_buffer()
    buf.advantages[2, 3] = float("nan")
    before = params(pol)
    m = update(ppo, buf, gen())
    assert m["train/skipped_updates"] == 2  # num_epochs
    assert m["train/updates"] == 2
    assert ppo.skipped_total == 2
    assert not same(before, params(pol))
    assert all(bool(torch.isfinite(p).all()) for p in pol.parameters())


@pytest.mark.parametrize("field", ["advantages", "returns", "obs"])
def test_nan_everywhere_skips_all_and_keeps_parameters(field: str) -> None:
    # advantages: with norm_adv=True a single NaN advantage makes the global mean NaN, so every
    # minibatch is poisoned; returns / obs: all NaN (NaN value loss / NaN network outputs).
    pol = policy()
    ppo = PPO(pol, BASE)
    buf = make_buffer()
    if field == "advantages":
        buf.advantages[0, 0] = float("nan")
    else:
        getattr(buf, field).fill_(float("nan"))
    before = params(pol)
    m = update(ppo, buf, gen())
    assert m["train/skipped_updates"] == 4
    assert m["train/updates"] == 0
    assert ppo.consecutive_skips == 4 and ppo.skipped_total == 4
    assert same(before, params(pol))
    assert len(ppo.optimizer.state) == 0  # Adam never stepped
    assert m["loss/policy"] == 0.0 and m["approx_kl"] == 0.0


def test_max_consecutive_skips_raises() -> None:
    cfg = dataclasses.replace(BASE, max_consecutive_skips=3)
    pol = policy()
    ppo = PPO(pol, cfg)
    buf = make_buffer()
    buf.advantages[0, 0] = float("nan")
    before = params(pol)
    with pytest.raises(NonFiniteError, match="3 consecutive"):
        update(ppo, buf, gen())
    assert ppo.consecutive_skips == 3
    assert same(before, params(pol))


def test_consecutive_skips_span_updates_and_reset_on_success() -> None:
    cfg = dataclasses.replace(BASE, max_consecutive_skips=6)
    ppo = PPO(policy(), cfg)
    bad, good = make_buffer(), make_buffer(seed=2)
    bad.advantages[0, 0] = float("nan")
    g = gen()
    update(ppo, bad, g)  # 4 consecutive skips
    update(ppo, good, g)  # resets the streak
    assert ppo.consecutive_skips == 0
    update(ppo, bad, g)  # 4 again: below 6
    assert ppo.consecutive_skips == 4 and ppo.skipped_total == 8
    with pytest.raises(NonFiniteError):
        update(ppo, bad, g)  # 5, 6 -> raises


def test_target_kl_stops_before_the_crossing_step() -> None:
    # old log-probs unrelated to the policy: the first minibatch already has KL > 1e-12, and the
    # step that crossed is not taken (SB3 rule): no update at all, parameters unchanged.
    cfg = dataclasses.replace(BASE, target_kl=1e-12)
    pol = policy()
    ppo = PPO(pol, cfg)
    before = params(pol)
    m = update(ppo, make_buffer(), gen())
    assert m["train/early_stop"] == 1.0
    assert m["train/updates"] == 0
    assert m["train/skipped_updates"] == 0
    assert same(before, params(pol))
    assert len(ppo.optimizer.state) == 0


def test_target_kl_takes_steps_until_crossing() -> None:
    # Old log-probs of the first minibatch are exactly what the policy computes on it (KL = 0,
    # not > target): that step is taken; the second minibatch (log-probs shifted by 1) crosses.
    cfg = dataclasses.replace(BASE, target_kl=1e-12)
    pol = policy()
    ppo = PPO(pol, cfg)
    buf = make_buffer()
    first = minibatch_indices(T, N, cfg.num_minibatches, gen(4))[0]
    flat = buf.flat()
    with torch.no_grad():
        lp, _, _ = pol.evaluate(flat.obs[first], flat.actions[first])
    flat.logprobs[first] = lp
    before = params(pol)
    m = update(ppo, buf, gen(4))
    assert m["train/early_stop"] == 1.0
    assert m["train/updates"] == 1
    assert m["approx_kl"] == 0.0  # the mean over taken steps: just the first, KL exactly 0
    assert not same(before, params(pol))


def test_no_early_stop_without_target_kl() -> None:
    m = update(PPO(policy(), BASE), make_buffer(), gen())
    assert m["train/early_stop"] == 0.0 and m["train/updates"] == 4
    assert m["approx_kl"] > 0.0


def test_adaptive_lr_moves_per_minibatch() -> None:
    # Old log-probs = policy's + 1: ratio e^-1 for every sample, KL = (e^-1 - 1) + 1 = 0.368 >> 2
    # desired_kl (0.02): the LR is divided by 1.5 before each of the 4 steps.
    cfg = dataclasses.replace(BASE, lr_schedule="adaptive", desired_kl=0.01)
    pol = policy()
    ppo = PPO(pol, cfg)
    buf = make_buffer(pol)
    buf.logprobs.add_(1.0)
    m = update(ppo, buf, gen())
    assert m["train/updates"] == 4
    assert m["lr"] == pytest.approx(1e-3 / 1.5**4)
    assert ppo.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 / 1.5**4)
    assert m["approx_kl"] == pytest.approx(torch.e**-1, rel=0.05)


def test_constant_lr_unchanged_and_linear_schedule() -> None:
    ppo = PPO(policy(), BASE)
    m = update(ppo, make_buffer(), gen())
    assert m["lr"] == 1e-3
    lin = PPO(policy(), dataclasses.replace(BASE, lr_schedule="linear", max_iterations=100))
    lin.schedule_lr(25)
    assert lin.lr == pytest.approx(0.75e-3)
    assert lin.optimizer.param_groups[0]["lr"] == pytest.approx(0.75e-3)
    ppo.schedule_lr(25)  # constant: no-op
    assert ppo.lr == 1e-3


def test_ratio_one_first_step_metrics() -> None:
    # With old log-probs from the policy itself and one minibatch / one epoch, the single step
    # sees ratio 1: approx_kl 0, clipfrac 0, and loss/policy = -mean(normalized A) = 0.
    cfg = dataclasses.replace(BASE, num_epochs=1, num_minibatches=1)
    pol = policy()
    m = update(PPO(pol, cfg), make_buffer(pol), gen())
    assert m["train/updates"] == 1
    assert m["approx_kl"] == 0.0 and m["clipfrac"] == 0.0
    assert abs(m["loss/policy"]) < 1e-6


def test_explained_variance() -> None:
    # returns = values exactly -> err = 0 -> EV = 1 ; returns constant -> var_r = 0 -> NaN
    buf = make_buffer()
    buf.returns.copy_(buf.values)
    assert update(PPO(policy(), BASE), buf, gen())["explained_variance"] == pytest.approx(1.0)
    buf.returns.fill_(3.0)
    ev = update(PPO(policy(), BASE), buf, gen())["explained_variance"]
    assert ev != ev  # NaN


def test_state_dict_roundtrip() -> None:
    ppo = PPO(policy(), BASE)
    update(ppo, make_buffer(), gen())
    ppo.set_lr(3e-4)
    ppo.skipped_total = 7
    other = PPO(policy(), BASE)
    other.load_state_dict(ppo.state_dict())
    assert other.lr == 3e-4 and other.optimizer.param_groups[0]["lr"] == 3e-4
    assert other.skipped_total == 7
    assert_grads_are_views(other)
