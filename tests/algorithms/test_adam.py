"""FlatAdam is torch.optim.Adam on one flat tensor, bit for bit, state dicts included."""

from __future__ import annotations

import copy

import torch

from distrl.algorithms.adam import FlatAdam


def _pair(n=257, lr=1e-3, eps=1e-5):
    g = torch.Generator().manual_seed(0)
    a = torch.nn.Parameter(torch.randn(n, generator=g))
    b = torch.nn.Parameter(a.detach().clone())
    return a, torch.optim.Adam([a], lr=lr, eps=eps), b, FlatAdam(b, lr=lr, eps=eps), g


def _steps(a, opt_a, b, opt_b, g, k, lrs=(1e-3, 3e-3, 1e-4)):
    for i in range(k):
        grad = torch.randn(a.shape, generator=g) * 10 ** (i % 4 - 2)
        a.grad, b.grad = grad.clone(), grad.clone()
        lr = lrs[i % len(lrs)]
        opt_a.param_groups[0]["lr"] = opt_b.param_groups[0]["lr"] = lr
        opt_a.step()
        opt_b.step()
        assert torch.equal(a, b), f"step {i}"


def test_bitwise_equal_to_torch_adam():
    a, opt_a, b, opt_b, g = _pair()
    _steps(a, opt_a, b, opt_b, g, 60)
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(opt_a.state[a][key], opt_b.state[0][key])


def test_state_dicts_load_across():
    a, opt_a, b, opt_b, g = _pair()
    _steps(a, opt_a, b, opt_b, g, 7)
    # deep copies, as a checkpoint's save and load make (state_dict() returns live tensors)
    sa, sb = copy.deepcopy(opt_a.state_dict()), copy.deepcopy(opt_b.state_dict())
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    # torch's state into FlatAdam and FlatAdam's into torch: both go on bit for bit
    c = torch.nn.Parameter(b.detach().clone())
    opt_c = FlatAdam(c, lr=1.0)
    opt_c.load_state_dict(sa)
    d = torch.nn.Parameter(a.detach().clone())
    opt_d = torch.optim.Adam([d], lr=1.0)
    opt_d.load_state_dict(sb)
    g2 = torch.Generator().manual_seed(1)
    _steps(d, opt_d, c, opt_c, g2, 20)
    g3 = torch.Generator().manual_seed(1)
    _steps(a, opt_a, b, opt_b, g3, 20)
    assert torch.equal(a, c)


def test_no_grad_no_step_and_bad_state_is_refused():
    p = torch.nn.Parameter(torch.ones(3))
    opt = FlatAdam(p, lr=0.1)
    opt.step()
    assert torch.equal(p, torch.ones(3)) and not opt.state
    other = torch.optim.Adam([torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))])
    try:
        opt.load_state_dict(other.state_dict())
    except ValueError as e:
        assert "one group of one flat parameter" in str(e)
    else:
        raise AssertionError("two parameters accepted")
