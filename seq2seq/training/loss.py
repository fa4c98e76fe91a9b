"""Label-smoothed cross-entropy that also yields the plain NLL for perplexity: fast and plain.

The logits of a batch are large ((B, T, V), tens of MB), and autograd's log-softmax path
materialises several float32 copies of them (log-probabilities, the gradients of the gather and
of the mean): in bf16 that took a fifth of a training step (``bench/train_step.py``). Here the
backward pass writes the gradient once, from the closed form
``dloss/dlogits = softmax - (1 - ε)·onehot(target) - ε/V``, and all float32 work happens in
row chunks (512 KB on a CPU, to stay in its L2 cache). Only the real target tokens are projected
and scored (:func:`sequence_loss`), and the same pass over the logits counts the tokens that the
model ranks first, which the accuracy metric would otherwise read the logits again for (a
target tied for first counts: a row maximum costs a tenth of ``argmax`` on a CPU).
:func:`plain_label_smoothed_loss` is the same loss in PyTorch's own ops, the reference the fast
one is tested against.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CPU_CHUNK_ELEMENTS = 2**17  # float32 scratch of 512 KB: a chunk's passes stay in the L2 cache
GPU_CHUNK_ELEMENTS = 2**26  # 256 MB: few kernel launches, float32 scratch still bounded


def _row_chunks(logits: Tensor) -> list[slice]:
    elements = CPU_CHUNK_ELEMENTS if logits.device.type == "cpu" else GPU_CHUNK_ELEMENTS
    rows = max(1, elements // logits.size(1))
    return [slice(start, start + rows) for start in range(0, logits.size(0), rows)]


class LossSums(NamedTuple):
    """What a batch's loss gives the module: sums over its real (non-pad) target tokens."""

    loss: Tensor  # label-smoothed cross-entropy, differentiable
    nll: Tensor  # plain negative log-likelihood, for perplexity
    correct: Tensor  # tokens whose target's logit is the largest (a tie for first counts), for accuracy
    tokens: Tensor  # real target tokens


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Summed smoothed loss, summed NLL and top-1 hits of logits (N, V) against targets (N,).

    The forward keeps each row's log-sum-exp (N floats), so the backward gets the softmax with
    one subtraction and one exponential, written straight into the gradient when it is float32.
    """

    @staticmethod
    def forward(ctx: Any, logits: Tensor, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor, Tensor]:
        nll = logits.new_empty(logits.size(0), dtype=torch.float32)  # (N,)
        uniform = torch.empty_like(nll)  # (N,): cross-entropy against the uniform distribution
        log_norm = torch.empty_like(nll)  # (N,): log-sum-exp of each row
        correct = torch.zeros((), dtype=torch.long, device=logits.device)
        for rows in _row_chunks(logits):
            chunk, chunk_target = logits[rows], target[rows, None]  # (n, V), (n, 1)
            logp = chunk.float().log_softmax(dim=1)  # (n, V)
            target_logp = logp.gather(1, chunk_target).squeeze(1)  # (n,)
            nll[rows] = -target_logp
            uniform[rows] = -logp.mean(dim=1)
            target_logit = chunk.gather(1, chunk_target).squeeze(1)  # (n,)
            log_norm[rows] = target_logit.float() - target_logp
            correct += (target_logit == chunk.amax(dim=1)).sum()  # a tenth of argmax's time on a CPU
        ctx.save_for_backward(logits, target, log_norm)
        ctx.smoothing = smoothing
        ctx.mark_non_differentiable(nll, correct)
        return ((1.0 - smoothing) * nll + smoothing * uniform).sum(), nll.sum(), correct

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor, _nll: Tensor, _correct: Tensor) -> tuple[Tensor, None, None]:
        logits, target, log_norm = ctx.saved_tensors
        smoothing, vocab = ctx.smoothing, logits.size(1)
        grad = torch.empty_like(logits)
        in_place = logits.dtype == torch.float32
        for rows in _row_chunks(logits):
            chunk = logits[rows]  # (n, V)
            scratch = grad[rows] if in_place else None  # bf16/fp16 logits: work in float32, then cast
            probs = torch.sub(chunk.float(), log_norm[rows, None], out=scratch).exp_()  # (n, V): softmax
            probs.sub_(smoothing / vocab).mul_(grad_loss)
            hit = (grad_loss * -(1.0 - smoothing)).expand(probs.size(0), 1)  # (n, 1)
            probs.scatter_add_(1, target[rows, None], hit)
            if not in_place:
                grad[rows] = probs
        return grad, None, None


def _sums(logits: Tensor, target: Tensor, smoothing: float, tokens: Tensor) -> LossSums:
    loss, nll, correct = _SmoothedCrossEntropy.apply(logits, target, smoothing)
    return LossSums(loss, nll, correct, tokens)


def sequence_loss(
    states: Tensor, generator: nn.Module, target: Tensor, smoothing: float, pad_id: int
) -> LossSums:
    """The output projection and the loss of a teacher-forced batch, at real target tokens only.

    states: the decoder's final states (B, T, D), target: (B, T). Pad positions, about 6 % of the
    default recipe's targets, never reach the (D x V) projection, and no (B, T, V) tensor is made.
    """
    real = target != pad_id  # (B, T)
    return _sums(generator(states[real]), target[real], smoothing, real.sum())  # logits (N, V)


def label_smoothed_loss(logits: Tensor, target: Tensor, smoothing: float, pad_id: int) -> LossSums:
    """:func:`sequence_loss` from logits already projected: (B, T, V) against (B, T)."""
    real = target != pad_id
    return _sums(logits[real], target[real], smoothing, real.sum())


def plain_label_smoothed_loss(logits: Tensor, target: Tensor, smoothing: float, pad_id: int) -> LossSums:
    """What :func:`label_smoothed_loss` computes, written with ``F.cross_entropy`` and autograd."""
    flat_logits, flat_target = logits.flatten(0, 1).float(), target.flatten()  # (B·T, V), (B·T,)
    loss = F.cross_entropy(
        flat_logits, flat_target, ignore_index=pad_id, label_smoothing=smoothing, reduction="sum"
    )
    nll = F.cross_entropy(flat_logits, flat_target, ignore_index=pad_id, reduction="sum")
    real = flat_target != pad_id
    target_logit = flat_logits.gather(1, flat_target[:, None]).squeeze(1)
    correct = ((target_logit == flat_logits.max(dim=1).values) & real).sum()
    return LossSums(loss, nll.detach(), correct, real.sum())
