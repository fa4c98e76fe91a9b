"""What a search scores next tokens with: one model's steps, the average of several models' (an
ensemble), and either with a target prefix forced through the first steps.

Each wraps :class:`~seq2seq.decoding.steps.Steps`' interface (``log_probs``, ``select``,
``reorder``, ``vocabulary_ids``, ``special``), so greedy and beam search run on any of them
unchanged. An ensemble averages its members' log-probabilities (OpenNMT-py's rule; each member's
own PAD/BOS/EOS bans apply, so they agree); each member keeps its own KV cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.captured_steps import CapturedSteps, Decoders
from seq2seq.decoding.steps import CachedSteps, Steps, output_limits
from seq2seq.model import Transformer

Models = Transformer | Sequence[Transformer]  # one model, or the members of an ensemble
NO_TOKEN = -1  # pads a shorter prefix in a (B, P) prefix tensor


class EnsembleSteps:
    """The average of several models' next-token log-probabilities; each model steps its own cache."""

    def __init__(self, members: list[Steps]) -> None:
        self.members = members
        self.special = members[0].special

    def log_probs(self, tokens: Tensor, step: int, cfg: DecodeConfig) -> Tensor:
        """tokens: (N,) -> the members' mean log-probabilities (N, V)."""
        total = self.members[0].log_probs(tokens, step, cfg)
        for member in self.members[1:]:
            total += member.log_probs(tokens, step, cfg)
        return total / len(self.members)

    def vocabulary_ids(self, tokens: list[int]) -> list[int]:
        return self.members[0].vocabulary_ids(tokens)

    def select(self, index: Tensor) -> None:
        for member in self.members:
            member.select(index)

    def reorder(self, rows: Tensor, sentences: Tensor | None = None, beams: int | None = None) -> None:
        for member in self.members:
            member.reorder(rows, sentences, beams)


class ForcedPrefix:
    """Steps whose first tokens are each sentence's prefix: at step t a sentence with a prefix longer
    than t may only emit its t-th token, at the log-probability the model gives it, so that scores
    cover the whole output. Sentences without one (a row of :data:`NO_TOKEN`) search freely."""

    def __init__(self, steps: Steps | EnsembleSteps, prefixes: Tensor) -> None:
        self.steps, self.special = steps, steps.special
        self.prefixes = prefixes  # (B, P) token (or candidate position) ids, NO_TOKEN-padded
        self.sentences = torch.arange(prefixes.size(0), device=prefixes.device)  # each active one's row

    def log_probs(self, tokens: Tensor, step: int, cfg: DecodeConfig) -> Tensor:
        """tokens: (N,) -> (N, V), rows still inside their prefix at -inf but for its token."""
        logprobs = self.steps.log_probs(tokens, step, cfg)
        if step >= self.prefixes.size(1):
            return logprobs
        per_sentence = tokens.size(0) // self.sentences.size(0)  # 1 at first, the beam size after
        forced = self.prefixes[self.sentences, step].repeat_interleave(per_sentence)  # (N,)
        rows = (forced != NO_TOKEN).nonzero().squeeze(1)
        if rows.numel():
            kept = logprobs[rows, forced[rows]]
            logprobs[rows] = float("-inf")
            logprobs[rows, forced[rows]] = kept
        return logprobs

    def vocabulary_ids(self, tokens: list[int]) -> list[int]:
        return self.steps.vocabulary_ids(tokens)

    def select(self, index: Tensor) -> None:
        self.sentences = self.sentences[index]
        self.steps.select(index)

    def reorder(self, rows: Tensor, sentences: Tensor | None = None, beams: int | None = None) -> None:
        if sentences is not None:
            self.sentences = self.sentences[sentences]
        self.steps.reorder(rows, sentences, beams)


Scorer = Steps | EnsembleSteps | ForcedPrefix


def prefix_tensor(
    prefixes: list[list[int]], candidates: Tensor | None, device: torch.device
) -> tuple[Tensor | None, Tensor]:
    """B lists of target ids as a (B, P) tensor padded with :data:`NO_TOKEN`; with a shortlist
    ``candidates`` (C,), the prefixes' types join it and the tensor holds positions in it."""
    longest = max(len(ids) for ids in prefixes)
    forced = torch.full((len(prefixes), longest), NO_TOKEN, dtype=torch.long)
    for row, ids in enumerate(prefixes):
        forced[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    forced = forced.to(device)
    if candidates is None:
        return None, forced
    candidates = torch.cat([candidates, forced[forced != NO_TOKEN]]).unique()  # sorted
    positions = torch.searchsorted(candidates, forced.clamp(min=0))
    return candidates, positions.masked_fill(forced == NO_TOKEN, NO_TOKEN)


def members(model: Models) -> list[Transformer]:
    """The models of ``model``: itself, or an ensemble's members."""
    return [model] if isinstance(model, Transformer) else list(model)


def start_steps(
    model: Models,
    src: Tensor,
    cfg: DecodeConfig,
    candidates: Tensor | None = None,
    prefixes: Tensor | None = None,
    decoders: Decoders | None = None,
) -> tuple[Scorer, Tensor]:
    """Encode ``src`` (B, S) with each model and start its cached steps (the eager KV cache, or the
    captured step when ``cfg.capture``); also returns each sentence's output length limit (B,), the
    tightest of the members'. ``prefixes`` (B, P): see :class:`ForcedPrefix`; positions in
    ``candidates`` when a shortlist restricts the output. ``decoders``: the captured decoders of the
    caller's models, kept for its next searches (none: this search's own, compiled for it)."""
    models = members(model)
    max_positions = min(m.cfg.max_positions for m in models)
    limits = output_limits(src, cfg, max_positions, models[0].pad_id)
    decoders = {} if decoders is None else decoders
    steps: list[Steps] = []
    for m in models:
        memory, src_mask = m.encode(src)
        if cfg.capture:
            steps.append(CapturedSteps(m, memory, src_mask, limits, cfg.beam_size, decoders, candidates))
        else:
            steps.append(CachedSteps(m, memory, src_mask, candidates))
    scorer: Scorer = steps[0] if len(steps) == 1 else EnsembleSteps(steps)
    if prefixes is not None:
        scorer = ForcedPrefix(scorer, prefixes)
    return scorer, limits
