"""RMSNorm with a hand-written backward, for the per-head query/key norms of QK-norm.

``nn.RMSNorm`` on a CPU runs as a chain of small ATen ops (square, mean, add, rsqrt, two
products), and autograd records each, so its backward is twice as long again; applied to every
head's queries and keys, that chain slows a QK-norm step. This version saves the normalised input
and the inverse RMS, and its backward is a few products and two reductions. The module keeps
``nn.RMSNorm``'s parameter (``weight``) and maths, so checkpoints and exports see no difference.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class _RMSNormFunction(torch.autograd.Function):
    """y = x / sqrt(mean(x²) + eps) · w over the last axis; computed in fp32, returned in x's dtype."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        x32 = x.float()
        inv_rms = torch.rsqrt(x32.square().mean(-1, keepdim=True).add_(eps))
        normed = x32 * inv_rms
        ctx.save_for_backward(normed, weight, inv_rms)
        ctx.input_dtype = x.dtype
        return (normed * weight).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        normed, weight, inv_rms = ctx.saved_tensors
        grad = grad.float()
        grad_normed = grad * weight
        # d/dx of x·r(x): the component of grad_normed along the normalised row is removed.
        grad_x = (grad_normed - normed * (grad_normed * normed).mean(-1, keepdim=True)).mul_(inv_rms)
        grad_weight = (grad * normed).flatten(0, -2).sum(0).to(weight.dtype)
        return grad_x.to(ctx.input_dtype), grad_weight, None


class RMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` over the last axis, with an elementwise gain, through :class:`_RMSNormFunction`."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__(dim, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return _RMSNormFunction.apply(x, self.weight, self.eps)
