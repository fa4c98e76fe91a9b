"""The constrained search written per sentence, one hypothesis at a time, in plain Python: the
reference that :mod:`seq2seq.decoding.constrained`'s batched, vectorised search must agree with.
Dynamic beam allocation (Post & Vilar, 2018) as their paper tells it: K beams split evenly over the
banks of equal progress, best first within each; an empty bank lends its share to the others."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
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

    def startable(self, phrases: Phrases, ordered: bool) -> list[int]:
        """The phrases a token may start: those not met, or in order the first of them."""
        left = [i for i in range(len(phrases)) if i not in self.done]
        return left[:1] if ordered else left

    def wanted(self, phrases: Phrases, ordered: bool) -> set[int]:
        """Tokens that advance a phrase: the next of the one in progress, else the first of each other."""
        if self.current is not None:
            return {phrases[self.current][self.position]}
        return {phrases[i][0] for i in self.startable(phrases, ordered)}

    def after(self, token: int, phrases: Phrases, ordered: bool = False) -> Progress:
        """The progress once ``token`` is emitted."""
        if self.current is not None and phrases[self.current][self.position] == token:
            return self._advanced(self.current, self.position + 1, phrases)
        for i in self.startable(
            phrases, ordered
        ):  # a phrase broken off starts over; this token may start one
            if phrases[i][0] == token:
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


def _extensions(
    beams: list[_Beam], logprobs: Tensor, phrases: Phrases, k: int, eos: int, ordered: bool
) -> list[_Beam]:
    """Each beam's K best tokens and the tokens advancing its phrases (EOS once it is complete), as
    new beams; EOS ones have the EOS token last."""
    tokens = logprobs.topk(min(k, logprobs.size(-1)), dim=-1).indices.tolist()  # (n, K)
    found = []
    for parent, beam in enumerate(beams):
        picks = set(tokens[parent]) | beam.progress.wanted(phrases, ordered)
        if beam.progress.complete(phrases):
            picks.add(eos)
        else:
            picks.discard(eos)
        for token in sorted(picks):
            value = float(logprobs[parent, token])
            if value > float("-inf"):
                progress = beam.progress.after(token, phrases, ordered)
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
    steps: Scorer, limit: int, phrases: Phrases, cfg: DecodeConfig, device: torch.device, ordered: bool
) -> list[Hypothesis]:
    """One sentence's n-best under its constraints; ``steps`` holds its one source."""
    special = steps.special
    beams = [_Beam((), 0.0, Progress())]
    finished: list[Hypothesis] = []
    for t in range(limit):
        last = torch.tensor([b.tokens[-1] if b.tokens else special.bos for b in beams], device=device)
        penalty = length_penalty(t + 1, cfg.length_penalty)
        extended = []
        for beam in _extensions(
            beams, steps.log_probs(last, t, cfg), phrases, cfg.beam_size, special.eos, ordered
        ):
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
def reference_search(
    model: Models,
    src: Tensor,
    cfg: DecodeConfig,
    constraints: list[Phrases],
    prefixes: Tensor | None = None,
    ordered: bool = False,
) -> list[list[Hypothesis]]:
    """Each sentence's n-best under its (non-empty) constraints, one sentence at a time."""
    results = []
    for i, phrases in enumerate(constraints):
        rows = slice(i, i + 1)
        forced = None if prefixes is None else prefixes[rows]
        steps, limits = start_steps(model, src[rows], cfg, None, forced)
        results.append(_search_one(steps, int(limits[0]), phrases, cfg, src.device, ordered))
    return results
