"""Label-smoothed cross-entropy that also yields the plain NLL for perplexity."""

from __future__ import annotations

from torch import Tensor

from seq2seq.tokenizer import PAD_ID


def label_smoothed_loss(logits: Tensor, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor, Tensor]:
    """Summed smoothed loss, summed NLL and real-token count; pad targets are ignored.

    logits: (B, T, V), target: (B, T). One log-softmax serves both the training loss and the
    unsmoothed NLL that perplexity needs.
    """
    logp = logits.float().log_softmax(dim=-1)  # (B, T, V)
    real = target != PAD_ID
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    uniform = -logp.mean(dim=-1)  # (B, T): cross-entropy against the uniform distribution
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    return loss[real].sum(), nll[real].sum(), real.sum()
