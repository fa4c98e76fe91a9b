"""Batched beam search with per-sentence early finishing.

Each step takes each live beam's 2K best one-token extensions and merges them into the 2K best of
each sentence (:func:`_expand`; exact, since a sentence's 2K best are among its beams' own 2K
best), moves EOS-ending ones into the finished list (:func:`_finish_eos`), keeps the K best others
as the new beams (:func:`_prune`) and drops sentences that are done (:func:`_done`) from the batch
and the cache. A sentence is done when no live beam can still enter its n-best, or at its length
limit. (Stopping once K hypotheses have finished, fairseq's shortcut, returns poor early
finishers of a confident model while its best beam is still mid-sentence.)

A new beam that is its parent's first child takes the parent's row (:func:`rows_in_place`), so a
step copies only the cache rows of the beams that branched; a sentence's beams are therefore in no
particular order, and nothing reads them in order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.captured_steps import Decoders
from seq2seq.decoding.scorers import Models, start_steps
from seq2seq.decoding.steps import Hypothesis, length_penalty


class _Candidates(NamedTuple):
    """The top 2K continuations of each sentence, best first; each (n, 2K)."""

    scores: Tensor  # cumulative log-probabilities
    beams: Tensor  # which of the sentence's K beams each extends
    tokens: Tensor  # the token it appends


@dataclass
class Beams:
    """Live beams of the sentences still being searched; beam rows are sentence-major.

    L, the live beams per sentence, is 1 before the first step and K after it.
    """

    rows: Tensor  # (n,) original index of each active sentence
    limits: Tensor  # (n,) output length limit
    scores: Tensor  # (n, L) cumulative log-probabilities
    tokens: Tensor  # (n·L, t) tokens emitted so far
    n_finished: Tensor  # (n,) hypotheses finished so far
    threshold: Tensor  # (n,) score a hypothesis needs to enter the n-best; -inf until nbest finished
    last_penalty: Tensor  # (n,) the length penalty at the length limit, the largest a sentence can reach

    @staticmethod
    def start(limits: Tensor, alpha: float) -> Beams:
        """One live beam per sentence, nothing emitted, until the first step branches it into K."""
        batch, device = limits.size(0), limits.device
        return Beams(
            rows=torch.arange(batch, device=device),
            limits=limits,
            scores=torch.zeros(batch, 1, device=device),
            tokens=torch.empty(batch, 0, dtype=torch.long, device=device),
            n_finished=torch.zeros(batch, dtype=torch.long, device=device),
            threshold=torch.full((batch,), float("-inf"), device=device),
            last_penalty=length_penalty(limits.float(), alpha),
        )

    def keep(self, index: Tensor) -> tuple[Beams, Tensor]:
        """Only the sentences at ``index`` (n',); also returns their beam rows (n'·K,)."""
        k = self.scores.size(1)
        beam_rows = (index[:, None] * k + torch.arange(k, device=index.device)).view(-1)  # (n'·K,)
        kept = Beams(
            self.rows[index],
            self.limits[index],
            self.scores[index],
            self.tokens[beam_rows],
            self.n_finished[index],
            self.threshold[index],
            self.last_penalty[index],
        )
        return kept, beam_rows


def _top_log_probs(logprobs: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Each row's ``k`` best next tokens and their log-probabilities (of
    :meth:`~seq2seq.decoding.steps.Steps.log_probs`), best first. (N, V) -> values (N, k), tokens (N, k)."""
    return logprobs.topk(min(k, logprobs.size(-1)), dim=-1)


def _expand(scores: Tensor, top: tuple[Tensor, Tensor], beam_size: int) -> _Candidates:
    """Merge the live beams' best extensions into the 2K best of each sentence.

    scores: (n, L) with L live beams (1 at the first step, then K); top: each beam row's best
    log-probabilities and their tokens, (n·L, W) each, W = 2K (or the vocabulary, if smaller).
    Each beam has one EOS extension, so 2K candidates always hold >= K non-EOS ones.
    """
    n, live = scores.shape
    values, tokens = top
    width = values.size(1)
    total = (values + scores.view(-1, 1)).view(n, live * width)  # (n, L·W)
    best, flat = total.topk(min(2 * beam_size, live * width), dim=1)  # (n, 2K)
    return _Candidates(best, flat // width, tokens.view(n, live * width).gather(1, flat))


def record_finished(
    finished: list[list[Hypothesis]], beams: Beams, i: int, hypothesis: Hypothesis, nbest: int
) -> None:
    """Record a finished hypothesis of active sentence ``i`` and update its n-best threshold."""
    hypotheses = finished[int(beams.rows[i])]
    hypotheses.append(hypothesis)
    beams.n_finished[i] += 1
    if len(hypotheses) >= nbest:
        beams.threshold[i] = sorted((h.score for h in hypotheses), reverse=True)[nbest - 1]


def _finish_eos(
    finished: list[list[Hypothesis]], beams: Beams, cand: _Candidates, t: int, cfg: DecodeConfig, eos_id: int
) -> None:
    """EOS candidates ranked within the top K end their beam (fairseq's rule)."""
    k, live = cfg.beam_size, beams.scores.size(1)
    eos = (cand.tokens[:, :k] == eos_id) & torch.isfinite(cand.scores[:, :k])  # (n, K)
    if not eos.any():
        return
    normalised = (cand.scores[:, :k] / length_penalty(t + 1, cfg.length_penalty)).tolist()
    parents = cand.beams.tolist()
    for i, j in eos.nonzero().tolist():
        tokens = beams.tokens[i * live + parents[i][j]].tolist()
        record_finished(finished, beams, i, Hypothesis(tokens, normalised[i][j]), cfg.nbest)


def _prune(beams: Beams, cand: _Candidates, k: int, eos_id: int) -> tuple[Beams, Tensor]:
    """The K best non-EOS candidates become the new beams, placed by :func:`rows_in_place`; also
    returns each one's parent row (n·K,)."""
    n, live = beams.scores.shape
    width = cand.scores.size(1)
    rank = torch.arange(width, device=cand.tokens.device) + (cand.tokens == eos_id) * width  # EOS ranks last
    pick = rank.topk(k, dim=1, largest=False).indices  # (n, K), best first
    if live == k:
        pick = pick.gather(1, rows_in_place(cand.beams.gather(1, pick)))  # (n, K), in row order
    first_rows = torch.arange(n, device=pick.device)[:, None] * live  # (n, 1): row of each sentence's beam 0
    parents = (first_rows + cand.beams.gather(1, pick)).view(-1)  # (n·K,)
    tokens = torch.cat([beams.tokens[parents], cand.tokens.gather(1, pick).view(-1, 1)], dim=1)  # (n·K, t+1)
    return replace(beams, scores=cand.scores.gather(1, pick), tokens=tokens), parents


def rows_in_place(parents: Tensor) -> Tensor:
    """Which new beam each of a sentence's K rows holds, (n, K), given each new beam's parent row
    within its sentence, (n, K): a parent's first child stays in the parent's row, so its cache row
    is not copied; the other children take, in order, the rows of parents without children."""
    k = parents.size(1)
    rows = torch.arange(k, device=parents.device)
    child = parents[:, :, None] == rows  # (n, K new beams, K rows): beam j extends the beam of row r
    stays = (child & (child.cumsum(1) == 1)).any(2)  # (n, K): j is its parent's first child
    free = torch.where(child.any(1), k, rows).sort(dim=1).values  # (n, K): childless rows first
    movers = (~stays).cumsum(1) - 1  # (n, K): each other child's rank among them
    row = torch.where(stays, parents, free.gather(1, movers.clamp(min=0)))  # (n, K): each new beam's row
    return torch.empty_like(row).scatter_(1, row, rows.expand_as(row))


def _finish_at_limit(finished: list[list[Hypothesis]], beams: Beams, t: int, cfg: DecodeConfig) -> Tensor:
    """Live beams of sentences that reached their length limit end without EOS; returns that mask (n,)."""
    at_limit = t + 1 >= beams.limits
    if not at_limit.any():
        return at_limit
    k = cfg.beam_size
    normalised = (beams.scores / length_penalty(t + 1, cfg.length_penalty)).tolist()
    for i in at_limit.nonzero().squeeze(1).tolist():
        for j in range(k):
            if normalised[i][j] > float("-inf"):  # skip beams that never came alive
                hypothesis = Hypothesis(beams.tokens[i * k + j].tolist(), normalised[i][j])
                record_finished(finished, beams, i, hypothesis, cfg.nbest)
    return at_limit


def _done(beams: Beams, cfg: DecodeConfig) -> Tensor:
    """(n,) True where no live beam can still enter the n-best.

    A live score s <= 0 can only fall, so its best normalised value is s / penalty(limit).
    """
    best_live = beams.scores.max(dim=1).values / beams.last_penalty
    return (beams.n_finished >= cfg.nbest) & (best_live <= beams.threshold)


@torch.inference_mode()
def beam_search(
    model: Models,
    src: Tensor,
    cfg: DecodeConfig,
    candidates: Tensor | None = None,
    prefixes: Tensor | None = None,
    decoders: Decoders | None = None,
) -> list[list[Hypothesis]]:
    """Up to ``cfg.nbest`` hypotheses per sentence, best first. src: (B, S) padded ids ending in EOS.
    ``model``: one model or an ensemble's; ``candidates`` (C,): the vocabulary types the output may use
    (see :class:`CachedSteps`); ``prefixes`` (B, P): forced first tokens; ``decoders``: captured
    ones (both: see :func:`start_steps`)."""
    k, batch, device = cfg.beam_size, src.size(0), src.device
    steps, limits = start_steps(model, src, cfg, candidates, prefixes, decoders)
    special = steps.special
    beams = Beams.start(limits, cfg.length_penalty)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    last = torch.full((batch,), special.bos, dtype=torch.long, device=device)
    for t in range(int(beams.limits.max())):
        top = _top_log_probs(steps.log_probs(last, t, cfg), 2 * k)
        cand = _expand(beams.scores, top, k)
        _finish_eos(finished, beams, cand, t, cfg, special.eos)
        beams, parents = _prune(beams, cand, k, special.eos)
        active = ~(_finish_at_limit(finished, beams, t, cfg) | _done(beams, cfg))
        n_active = int(active.sum())
        if n_active == 0:
            break
        keep = None  # every sentence stays: beams move within their own sentence only
        if n_active < active.numel():  # drop the finished sentences, cache rows included, in the same move
            keep = active.nonzero().squeeze(1)
            beams, beam_rows = beams.keep(keep)
            parents = parents[beam_rows]
        steps.reorder(parents, keep, k)  # after the first step each sentence has K rows
        last = beams.tokens[:, -1]
    ranked = [sorted(hypotheses, key=lambda h: h.score, reverse=True)[: cfg.nbest] for hypotheses in finished]
    return [[replace(h, tokens=steps.vocabulary_ids(h.tokens)) for h in best] for best in ranked]
