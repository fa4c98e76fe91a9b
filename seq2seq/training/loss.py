"""Label-smoothed cross-entropy with the output projection, which also yields the NLL for perplexity
and the top-1 hits for accuracy: fast and plain.

Autograd's path through the projection and log-softmax keeps several float32 copies of a batch's
(B, T, V) logits. :func:`sequence_loss` runs the projection and the loss together in chunks of rows,
with the closed-form gradient ``softmax - (1 - ε)·onehot(target) - ε/V``, so no (B, T, V) tensor
exists and pad positions are never projected; the same pass counts the top-1 hits (a target tied
for first counts). :func:`fixed_sequence_loss` is the same loss over all positions, pads weighted to
zero, for a step compiled at fixed shapes. :func:`plain_sequence_loss` is the same loss in PyTorch's
own ops, the reference the fast ones are tested against.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

CPU_CHUNK_ELEMENTS = 2**22  # 512 rows of an 8,000-word vocabulary: 16 MB of float32 logits
GPU_CHUNK_ELEMENTS = 2**26  # 256 MB: few kernel launches, float32 scratch still bounded


class LossSums(NamedTuple):
    """What a batch's loss gives the module: sums over its real (non-pad) target tokens."""

    loss: Tensor  # label-smoothed cross-entropy, differentiable
    nll: Tensor  # plain negative log-likelihood, for perplexity
    correct: Tensor  # tokens whose target's logit is the largest (a tie for first counts), for accuracy
    tokens: int  # real target tokens


def _row_chunks(rows: int, vocab: int, device: torch.device) -> list[slice]:
    elements = CPU_CHUNK_ELEMENTS if device.type == "cpu" else GPU_CHUNK_ELEMENTS
    step = max(1, elements // vocab)
    return [slice(start, start + step) for start in range(0, rows, step)]


class _ProjectedSmoothedCrossEntropy(torch.autograd.Function):
    """Output projection and loss of states (N, D) through weight (V, D) against targets (N,), in
    row chunks: summed smoothed loss, summed NLL and top-1 hits; with ``keep`` (N,), a boolean
    mask, only of the rows it keeps: the others add nothing and get no gradient.

    The loss is the last thing a step computes, so the gradient of each chunk's logits is known in
    the forward pass, up to the scalar that the backward pass brings: each chunk's gradients of the
    states and of the weight are taken there, and the (N, V) logits and their gradient never exist
    whole. Matmuls run in autocast's dtype where it is on, the softmax and the sums in float32.
    """

    @staticmethod
    def forward(
        ctx: Any, states: Tensor, weight: Tensor, target: Tensor, smoothing: float, keep: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        vocab, needs_grad = weight.size(0), any(ctx.needs_input_grad[:2])
        loss, nll = (states.new_zeros((), dtype=torch.float) for _ in range(2))
        correct = states.new_zeros((), dtype=torch.long)
        state_grads: list[Tensor] = []  # (n, D) per chunk
        grad_weight: Tensor | None = None  # (V, D), summed over the chunks
        for rows in _row_chunks(states.size(0), vocab, states.device):
            x, chunk_target = states[rows], target[rows, None]  # (n, D), (n, 1)
            logits = x @ weight.t()  # (n, V), in autocast's dtype where it is on
            logp = logits.float().log_softmax(dim=1)  # (n, V)
            target_logp, mean_logp = logp.gather(1, chunk_target).squeeze(1), logp.mean(dim=1)  # (n,), (n,)
            target_logit = logits.gather(1, chunk_target).squeeze(1)  # (n,)
            hit = target_logit == logits.amax(dim=1)  # (n,), a tenth of argmax's time on a CPU
            if keep is not None:
                chunk_keep = keep[rows]  # (n,)
                target_logp, mean_logp = target_logp.where(chunk_keep, 0.0), mean_logp.where(chunk_keep, 0.0)
                hit = hit & chunk_keep
            nll = nll - target_logp.sum()
            loss = loss - ((1.0 - smoothing) * target_logp.sum() + smoothing * mean_logp.sum())
            correct = correct + hit.sum()
            if needs_grad:  # d(loss)/d(logits) = softmax - (1 - ε)·onehot(target) - ε/V
                grad = logp.exp_().sub_(smoothing / vocab)  # (n, V), in place of logp
                grad = grad.scatter_add(1, chunk_target, grad.new_full(chunk_target.shape, smoothing - 1.0))
                if keep is not None:
                    grad = grad.where(chunk_keep[:, None], 0.0)
                grad = grad.to(logits.dtype)  # once, for both matmuls
                state_grads.append(grad @ weight)  # (n, D)
                if grad_weight is None:
                    grad_weight = (grad.t() @ x).to(weight.dtype)
                elif grad.dtype == weight.dtype:
                    grad_weight = grad_weight.addmm(grad.t(), x)
                else:
                    grad_weight = grad_weight + grad.t() @ x  # bf16 under autocast: one rounding per chunk
        if needs_grad and not state_grads:  # no rows
            state_grads, grad_weight = [torch.zeros_like(states)], torch.zeros_like(weight)
        grad_states = torch.cat(state_grads) if needs_grad else None  # (N, D)
        ctx.save_for_backward(grad_states, grad_weight)
        ctx.mark_non_differentiable(nll, correct)
        return loss, nll, correct

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor, _nll: Tensor, _correct: Tensor) -> tuple[Tensor | None, ...]:
        grad_states, grad_weight = ctx.saved_tensors
        wanted = ctx.needs_input_grad
        return (
            grad_states * grad_loss if wanted[0] else None,
            grad_weight * grad_loss if wanted[1] else None,
            None,
            None,
            None,
        )


def real_positions(target: Tensor, pad_id: int) -> Tensor:
    """Where ``target`` (B, T) has real tokens, as positions in its flattened (B·T,) view: (N,).

    Counting them needs their values, so on a GPU this waits for the device; a batch made on the
    host carries them already (:attr:`seq2seq.data.batching.Batch.tgt_real`).
    """
    return (target != pad_id).flatten().nonzero().squeeze(1)


def sequence_loss(
    states: Tensor, weight: Tensor, target: Tensor, smoothing: float, pad_id: int, real: Tensor | None = None
) -> LossSums:
    """The output projection (``weight``: (V, D), no bias) and the loss of a teacher-forced batch,
    at real target tokens only. states: the decoder's final states (B, T, D), target: (B, T);
    ``real``: the real tokens' positions (:func:`real_positions`), computed here when not given.

    Pad positions never reach the projection.
    """
    real = real_positions(target, pad_id) if real is None else real  # (N,)
    flat_states = states.flatten(0, 1).index_select(0, real)  # (N, D)
    loss, nll, correct = _ProjectedSmoothedCrossEntropy.apply(
        flat_states, weight, target.flatten().index_select(0, real), smoothing, None
    )
    return LossSums(loss, nll, correct, real.numel())


def fixed_sequence_loss(
    states: Tensor, weight: Tensor, target: Tensor, smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`sequence_loss`'s sums (loss, NLL, correct) over all B·T positions, pads weighted to zero.

    Every shape follows the batch's and nothing counts real tokens (that count is the batch's,
    made on the host), so a step compiled at fixed shapes (:mod:`seq2seq.training.captured_step`)
    is one graph per batch shape, with no sync. Pad positions are projected for nothing: where a
    step runs eagerly, the gathered :func:`sequence_loss` is cheaper.
    """
    flat_target = target.flatten()  # (B·T,)
    return _ProjectedSmoothedCrossEntropy.apply(
        states.flatten(0, 1), weight, flat_target, smoothing, flat_target != pad_id
    )


def plain_sequence_loss(
    states: Tensor, weight: Tensor, target: Tensor, smoothing: float, pad_id: int
) -> LossSums:
    """What :func:`sequence_loss` computes, written with ``F.linear``, ``F.cross_entropy`` and autograd."""
    logits = F.linear(states, weight)  # (B, T, V)
    flat_logits, flat_target = logits.flatten(0, 1).float(), target.flatten()  # (B·T, V), (B·T,)
    loss = F.cross_entropy(
        flat_logits, flat_target, ignore_index=pad_id, label_smoothing=smoothing, reduction="sum"
    )
    nll = F.cross_entropy(flat_logits, flat_target, ignore_index=pad_id, reduction="sum")
    real = flat_target != pad_id
    target_logit = flat_logits.gather(1, flat_target[:, None]).squeeze(1)
    correct = ((target_logit == flat_logits.max(dim=1).values) & real).sum()
    return LossSums(loss, nll.detach(), correct, int(real.sum()))
