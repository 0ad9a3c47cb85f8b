"""The fused CPU Linear+tanh equals nn.Linear followed by torch.tanh, values and gradients."""

import pytest
import torch

from distrl.policy.actor_critic import LinearTanh


@pytest.mark.parametrize("batch", [8, 4096])  # native path, fused path
def test_linear_tanh_matches_linear_then_tanh(batch):
    torch.manual_seed(0)
    fused = LinearTanh(64, 64)
    ref = torch.nn.Linear(64, 64)
    ref.load_state_dict(fused.state_dict())
    x = (torch.randn(batch, 64) * 3).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = fused(x), torch.tanh(ref(x_ref))
    torch.testing.assert_close(y, y_ref, atol=5e-7, rtol=0)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (y_ref * g).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused.weight.grad, ref.weight.grad, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(fused.bias.grad, ref.bias.grad, atol=1e-4, rtol=1e-5)
