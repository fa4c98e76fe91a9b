"""Lexically constrained beam search, batched: every output contains each of its sentence's target
phrases (in the given order when asked), by dynamic beam allocation (Post & Vilar, 2018) in the
vectorised form of Hu et al. (2019).

A hypothesis's *progress* counts the constraint tokens it has met: the phrases produced and the
tokens of the one in progress (a phrase broken off starts over). A step extends each beam by its K
best tokens, the tokens that advance a phrase and, once every phrase is met, EOS; then each
sentence's K beams are filled round-robin over the banks of equal progress, most progress first and
best first within each, so a hypothesis behind on constraints is not crowded out by freer,
better-scored ones and an empty bank's share goes to the others. At the length limit only complete
hypotheses finish. Sentences without phrases get :func:`~seq2seq.decoding.beam.beam_search`'s output.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.beam import Beams, beam_search, record_finished, rows_in_place
from seq2seq.decoding.scorers import NO_TOKEN, Models, start_steps
from seq2seq.decoding.steps import Hypothesis, length_penalty

Phrases = list[list[int]]  # one sentence's constraints, as target ids (or shortlist positions)


@dataclass
class _State:
    """The search's beams, each beam row's progress, and each active sentence's phrases."""

    beams: Beams
    done: Tensor  # (N, P) phrases met; a sentence's missing phrase slots count as met
    current: Tensor  # (N,) the phrase in progress, -1 for none
    position: Tensor  # (N,) its tokens met so far
    phrases: Tensor  # (n, P, M) token ids, NO_TOKEN-padded
    lengths: Tensor  # (n, P) tokens per phrase, 0 for a missing one

    def keep(self, index: Tensor) -> tuple[_State, Tensor]:
        """Only the sentences at ``index`` (n',); also returns their beam rows."""
        beams, rows = self.beams.keep(index)
        return _State(
            beams,
            self.done[rows],
            self.current[rows],
            self.position[rows],
            self.phrases[index],
            self.lengths[index],
        ), rows


@dataclass
class _Candidates:
    """Each sentence's extensions, (n, C) with C = L·W: W per live beam."""

    scores: Tensor  # cumulative log-probabilities; -inf for no candidate
    tokens: Tensor
    beams: Tensor  # the beam (0..L-1) of its sentence each extends
    done: Tensor  # (n, C, P) phrases met once it is emitted
    current: Tensor  # the phrase then in progress, -1 for none
    position: Tensor  # its tokens met
    met: Tensor  # constraint tokens met: its bank
    eos: Tensor  # it ends its hypothesis


def _phrase_tensors(constraints: list[Phrases], device: torch.device) -> tuple[Tensor, Tensor]:
    """B sentences' phrases as (B, P, M) ids padded with NO_TOKEN, and their lengths (B, P)."""
    most = max(len(phrases) for phrases in constraints)
    longest = max(len(phrase) for phrases in constraints for phrase in phrases)
    ids = torch.full((len(constraints), most, longest), NO_TOKEN, dtype=torch.long)
    lengths = torch.zeros(len(constraints), most, dtype=torch.long)
    for row, phrases in enumerate(constraints):
        for slot, phrase in enumerate(phrases):
            ids[row, slot, : len(phrase)] = torch.tensor(phrase, dtype=torch.long)
            lengths[row, slot] = len(phrase)
    return ids.to(device), lengths.to(device)


def _extend(state: _State, logprobs: Tensor, k: int, eos: int, ordered: bool) -> _Candidates:
    """Each beam's K best tokens, the tokens that advance its phrases (the next token of the one in
    progress, else the first of each not met, or of the first not met when ``ordered``) and EOS when
    it is complete, each once, with the progress each would make. logprobs: (N, V)."""
    n, live = state.beams.scores.shape
    sentence = torch.arange(n, device=logprobs.device).repeat_interleave(live)  # (N,)
    phrases, lengths = state.phrases[sentence], state.lengths[sentence]  # (N, P, M), (N, P)
    slots = torch.arange(phrases.size(1), device=logprobs.device)  # (P,)
    complete, in_phrase = state.done.all(1), state.current >= 0  # (N,)
    following = phrases.gather(1, state.current.clamp(min=0)[:, None, None].expand(-1, 1, phrases.size(2)))
    following = following[:, 0].gather(1, state.position[:, None])  # (N, 1): the in-progress one's next
    startable = ~state.done  # (N, P)
    if ordered:
        startable &= slots == startable.int().argmax(1, keepdim=True)  # the first phrase not met
    wanted = torch.where(in_phrase[:, None], torch.where(slots == 0, following, NO_TOKEN), phrases[:, :, 0])
    wanted = wanted.masked_fill(~in_phrase[:, None] & ~startable, NO_TOKEN)  # (N, P)
    top = logprobs.topk(min(k, logprobs.size(1)), dim=1).indices  # (N, K)
    top = top.masked_fill((top == eos) & ~complete[:, None], NO_TOKEN)
    ending = torch.where(complete, eos, NO_TOKEN)[:, None]  # (N, 1)
    tokens = torch.cat([top, wanted, ending], dim=1).sort(dim=1).values  # (N, W)
    tokens[:, 1:] = tokens[:, 1:].masked_fill(tokens[:, 1:] == tokens[:, :-1], NO_TOKEN)  # each once
    scores = state.beams.scores.view(-1, 1) + logprobs.gather(1, tokens.clamp(min=0))  # (N, W)
    scores = scores.masked_fill(tokens == NO_TOKEN, float("-inf"))
    progress = _progress(state, tokens, phrases[:, :, 0], lengths, startable, following)
    width = tokens.size(1)
    beam = torch.arange(live, device=logprobs.device).repeat_interleave(width).expand(n, -1)  # (n, L·W)
    flat = [x.reshape(n, live * width, *x.shape[2:]) for x in (scores, tokens, *progress)]
    return _Candidates(flat[0], flat[1], beam, *flat[2:], flat[1] == eos)


def _progress(
    state: _State, tokens: Tensor, firsts: Tensor, lengths: Tensor, startable: Tensor, following: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Each beam's progress once it emits each of ``tokens`` (N, W): phrases met (N, W, P), the one
    in progress and its position, and the constraint tokens met, (N, W) each. ``firsts``, ``lengths``,
    ``startable``: (N, P); ``following``: (N, 1), the next token of the phrase in progress."""
    slots = torch.arange(firsts.size(1), device=tokens.device)  # (P,)
    advances = (state.current[:, None] >= 0) & (tokens == following)  # (N, W): the phrase in progress goes on
    starting = startable[:, None, :] & (firsts[:, None, :] == tokens[:, :, None])  # (N, W, P)
    moved = advances | starting.any(2)  # else a phrase in progress breaks off
    phrase = torch.where(advances, state.current[:, None], starting.int().argmax(2))  # (N, W): the first
    position = torch.where(advances, state.position[:, None] + 1, 1).masked_fill(~moved, 0)
    finished = moved & (position == lengths.gather(1, phrase))  # (N, W): a phrase met
    done = state.done[:, None, :] | (finished[:, :, None] & (slots == phrase[:, :, None]))  # (N, W, P)
    position = position.masked_fill(finished, 0)
    met = (done * lengths[:, None, :]).sum(2) + position  # (N, W)
    return done, phrase.masked_fill(~moved | finished, -1), position, met


def _allocate(cand: _Candidates, usable: Tensor, k: int) -> Tensor:
    """Each sentence's K new beams as candidate indices (n, K): round-robin over the banks, most
    progress first, best first within each (Post & Vilar's even split, an empty bank's share going
    to the others); fewer than K usable candidates leave -inf slots."""
    banks = int(cand.met.max()) + 1
    order = cand.scores.masked_fill(~usable, float("-inf")).argsort(dim=1, descending=True, stable=True)
    met, kept = cand.met.gather(1, order), usable.gather(1, order)  # (n, C), best first
    member = F.one_hot(met, banks) * kept[:, :, None]  # (n, C, banks)
    rank = (member.cumsum(1) * member).sum(2) - 1  # (n, C): place within its bank
    key = (rank * banks + banks - 1 - met).masked_fill(~kept, torch.iinfo(torch.long).max)
    return order.gather(1, key.topk(k, dim=1, largest=False).indices)


def _finish(
    finished: list[list[Hypothesis]],
    state: _State,
    cand: _Candidates,
    ending: Tensor,
    t: int,
    cfg: DecodeConfig,
) -> None:
    """Record the candidates at ``ending`` (n, C) that can still enter their sentence's n-best: those
    ending in EOS (the EOS left out), or complete ones at the length limit."""
    normalised = cand.scores / length_penalty(t + 1, cfg.length_penalty)
    ending = ending & (normalised > state.beams.threshold[:, None])
    if not ending.any():
        return
    live = state.beams.scores.size(1)
    for i, c in ending.nonzero().tolist():
        tokens = state.beams.tokens[i * live + int(cand.beams[i, c])].tolist()
        if not cand.eos[i, c]:
            tokens.append(int(cand.tokens[i, c]))
        record_finished(finished, state.beams, i, Hypothesis(tokens, float(normalised[i, c])), cfg.nbest)


def _best(scores: Tensor, mask: Tensor, count: int) -> Tensor:
    """``mask`` (n, C) narrowed to each sentence's ``count`` best-scored members."""
    best = scores.masked_fill(~mask, float("-inf")).topk(min(count, scores.size(1)), dim=1).indices
    return mask & torch.zeros_like(mask).scatter_(1, best, True)


def _advance(state: _State, cand: _Candidates, pick: Tensor, eos: int) -> tuple[_State, Tensor]:
    """The picked candidates (n, K) as the new beams; also returns each one's parent row (n·K,)."""
    n, live = state.beams.scores.shape
    parents = (torch.arange(n, device=pick.device)[:, None] * live + cand.beams.gather(1, pick)).view(-1)
    token = cand.tokens.gather(1, pick).view(-1, 1)  # (n·K, 1)
    token = token.masked_fill(token == NO_TOKEN, eos)  # a slot left empty feeds the model a real token
    done = cand.done.gather(1, pick[:, :, None].expand(-1, -1, cand.done.size(2)))  # (n, K, P)
    beams = replace(
        state.beams,
        scores=cand.scores.gather(1, pick),
        tokens=torch.cat([state.beams.tokens[parents], token], dim=1),  # (n·K, t+1)
    )
    progress = (
        done.flatten(0, 1),
        cand.current.gather(1, pick).view(-1),
        cand.position.gather(1, pick).view(-1),
    )
    return _State(beams, *progress, state.phrases, state.lengths), parents


def _done(beams: Beams, cfg: DecodeConfig) -> Tensor:
    """(n,) True where no live beam is left, or none can still enter the n-best (a score s <= 0 only
    falls, so its best normalised value is s / penalty(limit))."""
    best_live = beams.scores.max(dim=1).values
    beaten = (beams.n_finished >= cfg.nbest) & (best_live / beams.last_penalty <= beams.threshold)
    return beaten | (best_live == float("-inf"))


def _search(
    model: Models,
    src: Tensor,
    cfg: DecodeConfig,
    constraints: list[Phrases],
    candidates: Tensor | None,
    prefixes: Tensor | None,
    ordered: bool,
) -> list[list[Hypothesis]]:
    """The constrained n-best of sentences that each have at least one phrase."""
    k, batch, device = cfg.beam_size, src.size(0), src.device
    steps, limits = start_steps(model, src, cfg, candidates, prefixes)
    eos = steps.special.eos
    phrases, lengths = _phrase_tensors(constraints, device)
    beams = Beams.start(limits, cfg.length_penalty)
    no_phrase = torch.full((batch,), -1, dtype=torch.long, device=device)
    state = _State(beams, lengths == 0, no_phrase, torch.zeros_like(no_phrase), phrases, lengths)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    last = torch.full((batch,), steps.special.bos, dtype=torch.long, device=device)
    for t in range(int(limits.max())):
        cand = _extend(state, steps.log_probs(last, t, cfg), k, eos, ordered)
        alive = torch.isfinite(cand.scores)
        _finish(finished, state, cand, alive & cand.eos, t, cfg)
        usable = alive & ~cand.eos
        at_limit = t + 1 >= state.beams.limits  # (n,): complete hypotheses finish without EOS
        if at_limit.any():
            complete = usable & cand.done.all(2) & at_limit[:, None]
            _finish(finished, state, cand, _best(cand.scores, complete, cfg.nbest), t, cfg)
        pick = _allocate(cand, usable, k)
        if state.beams.scores.size(1) == k:
            pick = pick.gather(1, rows_in_place(cand.beams.gather(1, pick)))  # (n, K), in row order
        state, parents = _advance(state, cand, pick, eos)
        active = ~(at_limit | _done(state.beams, cfg))
        n_active = int(active.sum())
        if n_active == 0:
            break
        keep = None
        if n_active < active.numel():  # drop the finished sentences, cache rows included
            keep = active.nonzero().squeeze(1)
            state, rows = state.keep(keep)
            parents = parents[rows]
        steps.reorder(parents, keep, k)
        last = state.beams.tokens[:, -1]
    ranked = [sorted(hypotheses, key=lambda h: h.score, reverse=True)[: cfg.nbest] for hypotheses in finished]
    return [[replace(h, tokens=steps.vocabulary_ids(h.tokens)) for h in best] for best in ranked]


@torch.inference_mode()
def constrained_search(
    model: Models,
    src: Tensor,
    cfg: DecodeConfig,
    constraints: list[Phrases],
    candidates: Tensor | None = None,
    prefixes: Tensor | None = None,
    in_order: bool = False,
) -> list[list[Hypothesis]]:
    """Up to ``cfg.nbest`` hypotheses per sentence, best first, each containing every phrase of its
    sentence's ``constraints`` (B lists of target-id lists), in that order when ``in_order``; the
    sentences without any get plain :func:`~seq2seq.decoding.beam.beam_search`'s. src: (B, S);
    ``candidates``, ``prefixes``: as beam search takes them. Phrases that cannot fit a sentence's
    length limit give no hypothesis."""
    results: list[list[Hypothesis]] = [[] for _ in constraints]
    free = [i for i, phrases in enumerate(constraints) if not phrases]
    bound = [i for i, phrases in enumerate(constraints) if phrases]
    for rows in (free, bound):
        if not rows:
            continue
        index = torch.tensor(rows, device=src.device)
        forced = None if prefixes is None else prefixes[index]
        if rows is free:
            found = beam_search(model, src[index], cfg, candidates, forced)
        else:
            found = _search(
                model, src[index], cfg, [constraints[i] for i in rows], candidates, forced, in_order
            )
        for i, hypotheses in zip(rows, found, strict=True):
            results[i] = hypotheses
    return results
