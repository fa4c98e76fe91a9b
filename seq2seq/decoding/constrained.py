"""Lexically constrained beam search: every output contains each of a sentence's target phrases, by
dynamic beam allocation (Post & Vilar, 2018).

Each hypothesis tracks which phrases it has produced and how far into the phrase in progress it
is; its *progress* counts the constraint tokens met. A step gathers each beam's best K extensions
and, for each beam, the tokens that advance a phrase, then splits the K new beams evenly across the
banks of equal progress (empty banks lend their share to the others, best first), so a hypothesis
that is behind on constraints is not crowded out by freer but better-scored ones. EOS is allowed
only once every phrase is met; at the length limit only complete hypotheses finish. A phrase
broken off is started over. Sentences are searched one at a time, on the same steps (an ensemble,
a forced prefix) as :func:`~seq2seq.decoding.beam.beam_search`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.beam import beam_search
from seq2seq.decoding.scorers import Models, Scorer, start_steps
from seq2seq.decoding.steps import Hypothesis, length_penalty

Phrases = list[list[int]]  # one sentence's constraints, as target ids (or shortlist positions)


@dataclass(frozen=True)
class Progress:
    """How far a hypothesis is through its sentence's phrases."""

    done: frozenset[int] = frozenset()  # phrases produced
    current: int | None = None  # the phrase in progress
    position: int = 0  # its tokens produced so far

    def met(self, phrases: Phrases) -> int:
        """Constraint tokens produced: the bank this hypothesis belongs to."""
        return sum(len(phrases[i]) for i in self.done) + self.position

    def complete(self, phrases: Phrases) -> bool:
        return len(self.done) == len(phrases)

    def wanted(self, phrases: Phrases) -> set[int]:
        """Tokens that advance a phrase: the next of the one in progress, else the first of each other."""
        if self.current is not None:
            return {phrases[self.current][self.position]}
        return {phrases[i][0] for i in range(len(phrases)) if i not in self.done}

    def after(self, token: int, phrases: Phrases) -> Progress:
        """The progress once ``token`` is emitted."""
        if self.current is not None and phrases[self.current][self.position] == token:
            return self._advanced(self.current, self.position + 1, phrases)
        for i, phrase in enumerate(phrases):  # a phrase broken off starts over; this token may start one
            if i not in self.done and phrase[0] == token:
                return Progress(self.done)._advanced(i, 1, phrases)
        return Progress(self.done)

    def _advanced(self, phrase: int, position: int, phrases: Phrases) -> Progress:
        if position == len(phrases[phrase]):
            return Progress(self.done | {phrase})
        return Progress(self.done, phrase, position)


@dataclass(frozen=True)
class _Beam:
    tokens: tuple[int, ...]
    score: float  # cumulative log-probability
    progress: Progress
    parent: int = 0  # its row in the previous step's beams


def _extensions(beams: list[_Beam], logprobs: Tensor, phrases: Phrases, k: int, eos: int) -> list[_Beam]:
    """Each beam's K best tokens and the tokens advancing its phrases (EOS once it is complete), as
    new beams; EOS ones have the EOS token last."""
    tokens = logprobs.topk(min(k, logprobs.size(-1)), dim=-1).indices.tolist()  # (n, K)
    found = []
    for parent, beam in enumerate(beams):
        picks = set(tokens[parent]) | beam.progress.wanted(phrases)
        if beam.progress.complete(phrases):
            picks.add(eos)
        else:
            picks.discard(eos)
        for token in sorted(picks):
            value = float(logprobs[parent, token])
            if value > float("-inf"):
                progress = beam.progress.after(token, phrases)
                found.append(_Beam((*beam.tokens, token), beam.score + value, progress, parent))
    return found


def _allocate(candidates: list[_Beam], phrases: Phrases, k: int) -> list[_Beam]:
    """K beams split evenly over the banks of equal progress, best first within each; a bank with
    too few candidates lends its share to the others."""
    banks: dict[int, list[_Beam]] = {}
    for beam in sorted(candidates, key=lambda b: b.score, reverse=True):
        banks.setdefault(beam.progress.met(phrases), []).append(beam)
    chosen: list[_Beam] = []
    order = sorted(banks, reverse=True)  # the most progress first gets any remainder
    while len(chosen) < k and any(banks[b] for b in order):
        live = [b for b in order if banks[b]]
        share = max(1, (k - len(chosen)) // len(live))
        for bank in live:
            taken, banks[bank] = banks[bank][:share], banks[bank][share:]
            chosen.extend(taken[: k - len(chosen)])
    return chosen


def _search_one(
    steps: Scorer, limit: int, phrases: Phrases, cfg: DecodeConfig, device: torch.device
) -> list[Hypothesis]:
    """One sentence's n-best under its constraints; ``steps`` holds its one source."""
    special = steps.special
    beams = [_Beam((), 0.0, Progress())]
    finished: list[Hypothesis] = []
    for t in range(limit):
        last = torch.tensor([b.tokens[-1] if b.tokens else special.bos for b in beams], device=device)
        penalty = length_penalty(t + 1, cfg.length_penalty)
        extended = []
        for beam in _extensions(beams, steps.log_probs(last, t, cfg), phrases, cfg.beam_size, special.eos):
            if beam.tokens[-1] == special.eos:
                finished.append(Hypothesis(list(beam.tokens[:-1]), beam.score / penalty))
            else:
                extended.append(beam)
        if t + 1 == limit:  # at the limit, complete hypotheses finish without EOS
            complete = [b for b in extended if b.progress.complete(phrases)]
            finished += [Hypothesis(list(b.tokens), b.score / penalty) for b in complete]
            break
        beams = _allocate(extended, phrases, cfg.beam_size)
        if not beams or _done(finished, beams, limit, cfg):
            break
        steps.reorder(torch.tensor([b.parent for b in beams], device=device), None, len(beams))
    return sorted(finished, key=lambda h: h.score, reverse=True)[: cfg.nbest]


def _done(finished: list[Hypothesis], beams: list[_Beam], limit: int, cfg: DecodeConfig) -> bool:
    """No live beam can still enter the n-best: a score s <= 0 only falls, so its best normalised
    value is s / penalty(limit)."""
    if len(finished) < cfg.nbest:
        return False
    threshold = sorted((h.score for h in finished), reverse=True)[cfg.nbest - 1]
    return max(b.score for b in beams) / length_penalty(limit, cfg.length_penalty) <= threshold


@torch.inference_mode()
def constrained_search(
    model: Models,
    src: Tensor,
    cfg: DecodeConfig,
    constraints: list[Phrases],
    candidates: Tensor | None = None,
    prefixes: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Up to ``cfg.nbest`` hypotheses per sentence, best first, each containing every phrase of its
    sentence's ``constraints`` (B lists of target-id lists; a sentence without any gets plain
    :func:`~seq2seq.decoding.beam.beam_search`'s). src: (B, S); ``candidates``, ``prefixes``: as
    beam search takes them. Phrases that cannot fit a sentence's length limit give no hypothesis."""
    results = []
    for i, phrases in enumerate(constraints):
        rows = slice(i, i + 1)
        forced = None if prefixes is None else prefixes[rows]
        if not phrases:
            results += beam_search(model, src[rows], cfg, candidates, forced)
            continue
        steps, limits = start_steps(model, src[rows], cfg, candidates, forced)
        best = _search_one(steps, int(limits[0]), phrases, cfg, src.device)
        results.append([Hypothesis(steps.vocabulary_ids(h.tokens), h.score) for h in best])
    return results
