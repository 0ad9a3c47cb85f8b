"""V-trace against its definition, and against GAE on policy."""

from __future__ import annotations

import torch

from distrl.storage.advantages import gae, vtrace


def _batch(T=12, N=5, seed=0, dones=True):
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(T, N, generator=g)
    v = torch.randn(T, N, generator=g)
    term = (torch.rand(T, N, generator=g) < 0.1) if dones else torch.zeros(T, N, dtype=torch.bool)
    trunc = (torch.rand(T, N, generator=g) < 0.1) if dones else torch.zeros(T, N, dtype=torch.bool)
    fv, last = torch.randn(T, N, generator=g), torch.randn(N, generator=g)
    return r.double(), v.double(), term, trunc, fv.double(), last.double(), g


def test_on_policy_targets_are_gae_returns():
    r, v, term, trunc, fv, last, _ = _batch()
    adv, ret = gae(r, v, term, trunc, fv, last, 0.99, 0.95)
    _, vs = vtrace(r, v, term, trunc, fv, last, torch.zeros_like(r), 0.99, 0.95)
    torch.testing.assert_close(vs, ret, rtol=0, atol=1e-12)
    # lambda = 1: the one-step advantage on v_{s+1} is GAE(1)'s advantage
    adv1, _ = gae(r, v, term, trunc, fv, last, 0.99, 1.0)
    a1, _ = vtrace(r, v, term, trunc, fv, last, torch.zeros_like(r), 0.99, 1.0)
    torch.testing.assert_close(a1, adv1, rtol=0, atol=1e-12)


def test_off_policy_matches_the_definition():
    """v_s = V(s) + sum_t gamma^(t-s) (prod_{i<t} c_i) rho_t delta_t, episodes without ends."""
    r, v, term, trunc, fv, last, g = _batch(dones=False)
    log_rhos = torch.randn(r.shape, generator=g).double()
    gamma, lam, T = 0.9, 0.8, r.shape[0]
    adv, vs = vtrace(r, v, term, trunc, fv, last, log_rhos, gamma, lam, rho_bar=1.0, c_bar=1.0)
    rho = log_rhos.exp().clamp(max=1.0)
    c = lam * log_rhos.exp().clamp(max=1.0)
    vnext = torch.cat([v[1:], last[None]])
    delta = r + gamma * vnext - v
    want = v.clone()
    for s in range(T):
        prod = torch.ones_like(last)
        for t in range(s, T):
            want[s] += gamma ** (t - s) * prod * rho[t] * delta[t]
            prod = prod * c[t]
    torch.testing.assert_close(vs, want, rtol=0, atol=1e-10)
    vs_next = torch.cat([vs[1:], last[None]])
    torch.testing.assert_close(adv, rho * (r + gamma * vs_next - v), rtol=0, atol=1e-12)


def test_traces_stop_at_episode_ends():
    r, v, term, trunc, fv, last, g = _batch(T=3, N=1, dones=False)
    term[1, 0] = True  # the episode ends at step 1: nothing after it reaches step 0 or 1
    log_rhos = torch.randn(r.shape, generator=g).double()
    _, vs = vtrace(r, v, term, trunc, fv, last, log_rhos, 0.9, 1.0)
    r2 = r.clone()
    r2[2] += 100.0
    _, vs2 = vtrace(r2, v, term, trunc, fv, last, log_rhos, 0.9, 1.0)
    torch.testing.assert_close(vs[:2], vs2[:2], rtol=0, atol=0)
    assert not torch.equal(vs[2], vs2[2])
