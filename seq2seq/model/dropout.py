"""Inverted dropout that is cheap on a CPU: the same maths as ``nn.Dropout``, cheaper random bits.

PyTorch's CPU dropout draws one Bernoulli sample per element, a large share of a CPU training
step. Here one 64-bit random draw gives four 16-bit lanes,
each compared with a threshold, so the mask needs a quarter of the random bits. The drop
probability is rounded to a multiple of 1/65536.
On a GPU, and in code being compiled (whose kernels draw their own bits), PyTorch's dropout is used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 2**16  # values of one 16-bit lane


def keep_multiplier(x: Tensor, p: float) -> Tensor:
    """Random tensor shaped like ``x``: 0 with probability ~p, else 1/(1 - p), in ``x``'s dtype."""
    dropped_levels = min(round(p * LEVELS), LEVELS - 1)
    draws = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device)
    draws.random_(-(2**63), None)  # the full 64-bit range: all four lanes uniform
    lanes = draws.view(torch.int16)[: x.numel()].view(x.shape)  # uniform on [-2^15, 2^15)
    keep = lanes >= dropped_levels - LEVELS // 2
    return keep.to(x.dtype).mul_(LEVELS / (LEVELS - dropped_levels))


class Dropout(nn.Module):
    """Zeroes each element with probability ``p`` while training and scales the rest by 1/(1 - p)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or torch.compiler.is_compiling():
            return F.dropout(x, self.p, training=True)
        return x * keep_multiplier(x, self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"
