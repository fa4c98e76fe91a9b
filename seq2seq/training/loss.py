"""Label-smoothed cross-entropy that also yields the plain NLL for perplexity: fast and plain.

The logits of a batch are large ((B, T, V), tens of MB), and autograd's log-softmax path
materialises several float32 copies of them (log-probabilities, the gradients of the gather and
of the mean): in bf16 that took a fifth of a training step (``bench/train_step.py``). Here the
backward pass recomputes the softmax and writes the gradient once, from the closed form
``dloss/dlogits = softmax - (1 - ε)·onehot(target) - ε/V``, and all float32 work happens in
row chunks (512 KB on a CPU, to stay in its L2 cache). :func:`plain_label_smoothed_loss` is the
same loss in PyTorch's own ops, the reference the fast one is tested against.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

CPU_CHUNK_ELEMENTS = 2**17  # float32 scratch of 512 KB: a chunk's passes stay in the L2 cache
GPU_CHUNK_ELEMENTS = 2**26  # 256 MB: few kernel launches, float32 scratch still bounded


def _row_chunks(logits: Tensor) -> list[slice]:
    elements = CPU_CHUNK_ELEMENTS if logits.device.type == "cpu" else GPU_CHUNK_ELEMENTS
    rows = max(1, elements // logits.size(1))
    return [slice(start, start + rows) for start in range(0, logits.size(0), rows)]


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-row smoothed loss and NLL of logits (N, V) against targets (N,), both (N,) float32."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
        nll = logits.new_empty(logits.size(0), dtype=torch.float32)  # (N,)
        uniform = torch.empty_like(nll)  # (N,): cross-entropy against the uniform distribution
        for rows in _row_chunks(logits):
            logp = logits[rows].float().log_softmax(dim=1)  # (n, V)
            nll[rows] = -logp.gather(1, target[rows, None]).squeeze(1)
            uniform[rows] = -logp.mean(dim=1)
        ctx.save_for_backward(logits, target)
        ctx.smoothing = smoothing
        ctx.mark_non_differentiable(nll)
        return (1.0 - smoothing) * nll + smoothing * uniform, nll

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None]:
        logits, target = ctx.saved_tensors
        smoothing, vocab = ctx.smoothing, logits.size(1)
        grad = torch.empty_like(logits)
        for rows in _row_chunks(logits):
            g = grad_loss[rows, None]  # (n, 1)
            chunk = logits[rows].float().softmax(dim=1).mul_(g)  # (n, V), recomputed: cheaper than stored
            chunk.sub_(g * (smoothing / vocab))
            chunk.scatter_add_(1, target[rows, None], g * -(1.0 - smoothing))
            grad[rows] = chunk
        return grad, None, None


def label_smoothed_loss(
    logits: Tensor, target: Tensor, smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Summed smoothed loss, summed NLL and real-token count; ``pad_id`` targets are ignored.

    logits: (B, T, V), target: (B, T). One pass over the logits serves both the training loss
    and the unsmoothed NLL that perplexity needs.
    """
    loss, nll = _SmoothedCrossEntropy.apply(logits.flatten(0, 1), target.flatten(), smoothing)  # (B·T,)
    real = target.flatten() != pad_id
    return loss[real].sum(), nll[real].sum(), real.sum()


def plain_label_smoothed_loss(
    logits: Tensor, target: Tensor, smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """What :func:`label_smoothed_loss` computes, written with ``F.cross_entropy`` and autograd."""
    flat_logits, flat_target = logits.flatten(0, 1).float(), target.flatten()  # (B·T, V), (B·T,)
    loss = F.cross_entropy(
        flat_logits, flat_target, ignore_index=pad_id, label_smoothing=smoothing, reduction="sum"
    )
    nll = F.cross_entropy(flat_logits, flat_target, ignore_index=pad_id, reduction="sum")
    return loss, nll.detach(), (flat_target != pad_id).sum()
