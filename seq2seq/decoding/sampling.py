"""How greedy search picks each next token: the argmax, or a draw from a filtered distribution.

Sampling tempers the log-probabilities (divides them by the temperature), keeps the ``top_k``
likeliest tokens, then keeps the nucleus of what is left: the likeliest tokens whose probability
adds up to ``top_p`` (Holtzman et al., 2020), always at least the likeliest one. CTranslate2
filters in the same order, so an exported model samples from the same distribution.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig


def pick_next_tokens(logprobs: Tensor, cfg: DecodeConfig) -> tuple[Tensor, Tensor]:
    """The next token of each row and its (untempered) log-probability; (N, V) -> (N,), (N,).

    The argmax, or when ``cfg.sampling`` a draw from :func:`sampling_probs`.
    """
    if not cfg.sampling:
        values, tokens = logprobs.max(dim=-1)
        return tokens, values
    tokens = torch.multinomial(sampling_probs(logprobs, cfg), 1)  # (N, 1)
    return tokens.squeeze(1), logprobs.gather(1, tokens).squeeze(1)


def sampling_probs(logprobs: Tensor, cfg: DecodeConfig) -> Tensor:
    """The distribution a sampled token is drawn from: tempered, top-k, then top-p. (N, V) -> (N, V)."""
    scores = logprobs / cfg.temperature
    if 0 < cfg.top_k < scores.size(-1):
        scores = top_k_filter(scores, cfg.top_k)
    if cfg.top_p < 1.0:
        scores = top_p_filter(scores, cfg.top_p)
    return scores.softmax(dim=-1)


def top_k_filter(scores: Tensor, k: int) -> Tensor:
    """Scores below each row's k-th largest set to -inf. (N, V) -> (N, V)."""
    kth = scores.topk(k, dim=-1).values[:, -1:]  # (N, 1)
    return scores.masked_fill(scores < kth, float("-inf"))


def top_p_filter(scores: Tensor, p: float) -> Tensor:
    """Scores outside each row's nucleus set to -inf. (N, V) -> (N, V).

    A token stays when the tokens ranked above it hold less than ``p`` of the probability, so the
    nucleus is the shortest best-first prefix whose mass reaches ``p`` (the top token always stays).
    """
    sorted_scores, order = scores.sort(dim=-1, descending=True)  # (N, V), best first
    probs = sorted_scores.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # (N, V): probability ranked strictly above each token
    sorted_outside = mass_before >= p
    outside = torch.empty_like(sorted_outside).scatter_(-1, order, sorted_outside)  # vocabulary order
    return scores.masked_fill(outside, float("-inf"))
