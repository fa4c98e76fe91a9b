"""The QK-norm's RMSNorm, with its hand-written backward, against torch's nn.RMSNorm."""

import pytest
import torch
from torch import nn

from seq2seq.model.rms_norm import RMSNorm


@pytest.mark.parametrize("shape", [(3, 5, 4, 16), (2, 1, 16)])
def test_rms_norm_matches_torch_in_values_and_gradients(shape):
    torch.manual_seed(0)
    ours, theirs = RMSNorm(16, eps=1e-5), nn.RMSNorm(16, eps=1e-5)
    with torch.no_grad():
        ours.weight.copy_(1 + 0.3 * torch.randn(16))
        theirs.weight.copy_(ours.weight)
    x = (3 * torch.randn(shape)).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    upstream = torch.randn(shape)  # a loss whose gradient is not a multiple of the output
    out, out_ref = ours(x), theirs(x_ref)
    (out * upstream).sum().backward()
    (out_ref * upstream).sum().backward()
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad)


def test_rms_norm_returns_the_input_dtype_and_normalises_in_fp32():
    torch.manual_seed(0)
    norm = RMSNorm(16, eps=1e-5)
    x = torch.randn(4, 16).bfloat16().requires_grad_()
    y = norm(x)
    y.float().sum().backward()
    assert y.dtype == x.grad.dtype == torch.bfloat16
    expected = x.float() / x.float().square().mean(-1, keepdim=True).add(1e-5).sqrt()
    torch.testing.assert_close(y.float(), expected, atol=1e-2, rtol=1e-2)


def test_rms_norm_keeps_the_parameter_name_of_torch_s():
    assert RMSNorm(8, eps=1e-5).state_dict().keys() == nn.RMSNorm(8, eps=1e-5).state_dict().keys()
