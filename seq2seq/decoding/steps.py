"""Pieces both searches share: the output type, length limits and penalty, next-token scores,
and the two ways of getting next-token logits (KV cache, or full recomputation as a reference).

Scores are log-probabilities divided by the GNMT length penalty ((5 + len) / 6) ** alpha,
where len counts the emitted tokens including EOS.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass
from itertools import groupby

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.config import DecodeConfig, SpecialIds
from seq2seq.model import Transformer
from seq2seq.model.int8 import Int8Linear


@dataclass
class Hypothesis:
    """One output of the search."""

    tokens: list[int]  # target ids without BOS/EOS
    score: float  # length-normalised log-probability


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; 1 for alpha = 0."""
    return ((5 + length) / 6) ** alpha


def output_limits(src: Tensor, cfg: DecodeConfig, max_positions: int, pad_id: int) -> Tensor:
    """Most tokens each sentence may emit: a·src_len + b, within [1, max_positions]. src: (B, S) -> (B,).

    src_len counts the real (non-pad) source tokens, EOS included.
    """
    return limits_of_lengths((src != pad_id).sum(dim=1), cfg, max_positions)


def limits_of_lengths(src_len: Tensor, cfg: DecodeConfig, max_positions: int) -> Tensor:
    """:func:`output_limits` of source lengths (B,), EOS included -> (B,)."""
    return (cfg.max_len_a * src_len + cfg.max_len_b).long().clamp(1, max_positions)


def rows_by_limit(limits: list[int]) -> Iterator[tuple[int, list[int]]]:
    """(limit, rows with that limit), smallest limit first: for engines that take one limit per call."""
    for limit, rows in groupby(sorted(range(len(limits)), key=limits.__getitem__), limits.__getitem__):
        yield limit, list(rows)


class Steps(ABC):
    """What a search asks of its steps: next-token log-probabilities, so that an ensemble or a forced
    prefix (:mod:`seq2seq.decoding.scorers`) can stand in for one model's logits."""

    special: SpecialIds

    @abstractmethod
    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens: (N,) newest token per row -> next-token logits (N, V)."""

    def log_probs(self, tokens: Tensor, step: int, cfg: DecodeConfig) -> Tensor:
        """tokens: (N,) newest token per row -> :func:`next_log_probs` of the logits, (N, V)."""
        return next_log_probs(self(tokens), step, cfg, self.special)


class CachedSteps(Steps):
    """Next-token logits from the KV cache: step t costs O(t) attention, no recomputation.

    With ``candidates`` (C,), sorted vocabulary ids that include the special ids (a shortlist), the
    output projection and the search run over those C types only: tokens in and out, and
    :attr:`special`, are positions in ``candidates``; :meth:`vocabulary_ids` maps them back.
    """

    def __init__(
        self, model: Transformer, memory: Tensor, src_mask: Tensor, candidates: Tensor | None = None
    ) -> None:
        self.model = model
        self.cache = model.start_cache(memory, src_mask)
        self.candidates = candidates
        self.special = model.special_ids
        self.candidate_ids = [] if candidates is None else candidates.tolist()  # read once, not per sentence
        if candidates is not None:
            position = {i: p for p, i in enumerate(self.candidate_ids)}
            self.special = SpecialIds(*(position[i] for i in astuple(model.special_ids)))
            self.project = restricted_generator(model.generator, candidates)

    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens: (N,) newest token per row -> logits (N, V), or (N, C) over the candidates."""
        if self.candidates is None:
            logits, self.cache = self.model.step(tokens, self.cache)
            return logits
        states, self.cache = self.model.step_states(self.candidates[tokens], self.cache)
        return self.project(states)

    def vocabulary_ids(self, tokens: list[int]) -> list[int]:
        """Emitted tokens as vocabulary ids."""
        if self.candidates is None:
            return tokens
        return [self.candidate_ids[t] for t in tokens]

    def select(self, index: Tensor) -> None:
        """Keep/reorder the sentences of a one-row-per-sentence search (greedy): drop finished ones."""
        self.cache = self.cache.index_select(index)

    def reorder(self, rows: Tensor, sentences: Tensor | None = None, beams: int | None = None) -> None:
        """Beam rows follow their parents (n'·beams,); the sentences at ``sentences`` (n',) stay when
        given, else all. See :meth:`~seq2seq.model.transformer.DecoderCache.reorder`."""
        self.cache = self.cache.reorder(rows, sentences, beams)


class FullSteps(Steps):
    """Reference path without a cache: re-runs ``decode`` over the whole prefix at every step."""

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor) -> None:
        self.model = model
        self.special = model.special_ids
        self.memory, self.src_mask = memory, src_mask
        self.prefix = torch.empty(memory.size(0), 0, dtype=torch.long, device=memory.device)

    def __call__(self, tokens: Tensor) -> Tensor:
        self.prefix = torch.cat([self.prefix, tokens[:, None]], dim=1)  # (N, t)
        return self.model.decode(self.prefix, self.memory, self.src_mask)[:, -1]

    def vocabulary_ids(self, tokens: list[int]) -> list[int]:
        return tokens

    def select(self, index: Tensor) -> None:
        self.prefix, self.memory, self.src_mask = (
            x.index_select(0, index) for x in (self.prefix, self.memory, self.src_mask)
        )


def next_log_probs(logits: Tensor, step: int, cfg: DecodeConfig, special: SpecialIds) -> Tensor:
    """Log-softmax over the vocabulary with tokens that may not come next at -inf. (N, V) -> (N, V).

    PAD and BOS never appear in an output; EOS is forbidden before ``cfg.min_len`` tokens. Float32
    logits are normalised in place: they are large and used once.
    """
    if logits.dtype == torch.float32:
        logprobs = torch.log_softmax(logits, dim=-1, out=logits)
    else:
        logprobs = logits.log_softmax(dim=-1, dtype=torch.float32)
    banned = [special.pad, special.bos] if step >= cfg.min_len else [special.pad, special.bos, special.eos]
    logprobs[:, banned] = float("-inf")
    return logprobs


def restricted_generator(generator: nn.Module, rows: Tensor) -> Callable[[Tensor], Tensor]:
    """The output projection to the vocabulary types at ``rows`` (C,) only: (N, D) -> (N, C)."""
    if isinstance(generator, Int8Linear):
        return generator.rows(rows)
    weight = generator.weight[rows]  # (C, D), gathered once per batch
    return lambda states: F.linear(states, weight)
