"""The fused CPU Linear+tanh equals nn.Linear followed by torch.tanh, values and gradients."""

import copy

import pytest
import torch

from distrl.policy.actor_critic import LinearTanh


@pytest.mark.parametrize("batch", [8, 4096])  # native path, fused path
@pytest.mark.parametrize("in_features", [4, 64])  # a narrow first layer, a hidden layer
def test_linear_tanh_matches_linear_then_tanh(batch, in_features):
    torch.manual_seed(0)
    fused = LinearTanh(in_features, 64)
    ref = torch.nn.Linear(in_features, 64)
    ref.load_state_dict(fused.state_dict())
    x = (torch.randn(batch, in_features) * 3).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = fused(x), torch.tanh(ref(x_ref))
    torch.testing.assert_close(y, y_ref, atol=5e-7, rtol=0)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (y_ref * g).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    # the weight's gradient sums over the batch in another order: held against float64, it must
    # be as accurate as nn.Linear's (it is more accurate for narrow inputs)
    exact = copy.deepcopy(ref).double()
    exact.zero_grad(set_to_none=True)
    x64 = x.detach().double().requires_grad_()
    (torch.tanh(exact(x64)) * g.double()).sum().backward()
    err_fused = (fused.weight.grad.double() - exact.weight.grad).abs().max()
    err_native = (ref.weight.grad.double() - exact.weight.grad).abs().max()
    assert 0 < err_native < 1e-3  # a float32 rounding error, not a different gradient
    assert err_fused <= 1.5 * err_native + 1e-6, (err_fused, err_native)
    torch.testing.assert_close(fused.bias.grad, ref.bias.grad, atol=1e-4, rtol=1e-5)
