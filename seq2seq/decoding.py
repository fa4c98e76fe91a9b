"""Batched greedy and beam search over ``Transformer.encode`` and the cached incremental ``step``.

The encoder and every layer's cross-attention keys/values run once per source. A sentence
that finishes leaves the active batch at once (its cache rows are dropped with
``index_select``), so one long sentence does not make the short ones in its batch pay for
its extra steps. Scores are log-probabilities divided by the GNMT length penalty
((5 + len) / 6) ** alpha, where len counts the emitted tokens including EOS.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.model import Transformer
from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Hypothesis:
    """One output of the search."""

    tokens: list[int]  # target ids without BOS/EOS
    score: float  # length-normalised log-probability


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; 1 for alpha = 0."""
    return ((5 + length) / 6) ** alpha


def output_limits(src: Tensor, cfg: DecodeConfig, max_positions: int) -> Tensor:
    """Most tokens each sentence may emit: a·src_len + b, within [1, max_positions]. src: (B, S) -> (B,).

    src_len counts the real (non-pad) source tokens, EOS included.
    """
    src_len = (src != PAD_ID).sum(dim=1)
    return (cfg.max_len_a * src_len + cfg.max_len_b).long().clamp(1, max_positions)


class CachedSteps:
    """Next-token logits from the KV cache: step t costs O(t) attention, no recomputation."""

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor) -> None:
        self.model = model
        self.cache = model.start_cache(memory, src_mask)

    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens: (N,) newest token per row -> logits (N, V)."""
        logits, self.cache = self.model.step(tokens, self.cache)
        return logits

    def select(self, index: Tensor) -> None:
        """Keep/reorder rows: follow beams, drop finished sentences."""
        self.cache = self.cache.index_select(index)

    def reorder_beams(self, index: Tensor) -> None:
        """Reorder rows only among the beams of each sentence.

        Those rows share the same cross-attention K/V, so only the self-attention cache moves;
        copying the cross-attention K/V too would double the traffic of every beam step.
        """
        layers = [
            replace(
                layer, self_k=layer.self_k.index_select(0, index), self_v=layer.self_v.index_select(0, index)
            )
            for layer in self.cache.layers
        ]
        self.cache = replace(self.cache, layers=layers)


class FullSteps:
    """Reference path without a cache: re-runs ``decode`` over the whole prefix at every step."""

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor) -> None:
        self.model = model
        self.memory, self.src_mask = memory, src_mask
        self.prefix = torch.empty(memory.size(0), 0, dtype=torch.long, device=memory.device)

    def __call__(self, tokens: Tensor) -> Tensor:
        self.prefix = torch.cat([self.prefix, tokens[:, None]], dim=1)  # (N, t)
        return self.model.decode(self.prefix, self.memory, self.src_mask)[:, -1]

    def select(self, index: Tensor) -> None:
        self.prefix, self.memory, self.src_mask = (
            x.index_select(0, index) for x in (self.prefix, self.memory, self.src_mask)
        )


def next_log_probs(logits: Tensor, step: int, cfg: DecodeConfig) -> Tensor:
    """Log-softmax over the vocabulary with tokens that may not come next at -inf. (N, V) -> (N, V).

    PAD and BOS never appear in an output; EOS is forbidden before ``cfg.min_len`` tokens.
    """
    logprobs = logits.float().log_softmax(dim=-1)
    banned = [PAD_ID, BOS_ID] if step >= cfg.min_len else [PAD_ID, BOS_ID, EOS_ID]
    logprobs[:, banned] = float("-inf")
    return logprobs


def _choose(logprobs: Tensor, cfg: DecodeConfig) -> tuple[Tensor, Tensor]:
    """Argmax, or a draw from the tempered (top-k) distribution when sampling; (N, V) -> tokens and
    their log-probabilities, each (N,)."""
    if not cfg.sampling:
        values, tokens = logprobs.max(dim=-1)
        return tokens, values
    scaled = logprobs / cfg.temperature
    if 0 < cfg.top_k < scaled.size(-1):
        kth = scaled.topk(cfg.top_k, dim=-1).values[:, -1:]  # (N, 1)
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    tokens = torch.multinomial(scaled.softmax(dim=-1), 1)  # (N, 1)
    return tokens.squeeze(1), logprobs.gather(1, tokens).squeeze(1)


@torch.inference_mode()
def greedy_search(
    model: Transformer, src: Tensor, cfg: DecodeConfig, cached: bool = True
) -> list[list[Hypothesis]]:
    """One hypothesis per sentence. src: (B, S) ids ending in EOS, padded with PAD_ID.

    ``cached=False`` re-runs the full decoder each step; it exists to test and time the cache.
    """
    memory, src_mask = model.encode(src)
    steps = (CachedSteps if cached else FullSteps)(model, memory, src_mask)
    limits = output_limits(src, cfg, model.cfg.max_positions)  # (B,)
    batch, device = src.size(0), src.device
    rows = torch.arange(batch, device=device)  # original sentence of each active row
    out = torch.full((batch, int(limits.max())), PAD_ID, dtype=torch.long, device=device)
    logp = torch.zeros(batch, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    tokens = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    for t in range(out.size(1)):
        tokens, token_logp = _choose(next_log_probs(steps(tokens), t, cfg), cfg)
        logp[rows] += token_logp
        out[rows, t] = tokens
        done = (tokens == EOS_ID) | (t + 1 >= limits[rows])
        if done.any():
            lengths[rows[done]] = t + 1
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            rows, tokens = rows[keep], tokens[keep]
            steps.select(keep)
    scores = logp / length_penalty(lengths.float(), cfg.length_penalty)
    return [
        [Hypothesis(_strip_eos(row[:n]), score)]
        for row, n, score in zip(out.tolist(), lengths.tolist(), scores.tolist(), strict=True)
    ]


def _strip_eos(tokens: list[int]) -> list[int]:
    return tokens[:-1] if tokens and tokens[-1] == EOS_ID else tokens


class _Candidates(NamedTuple):
    """The top 2K continuations of each sentence, best first; each (n, 2K)."""

    scores: Tensor  # cumulative log-probabilities
    beams: Tensor  # which of the sentence's K beams each extends
    tokens: Tensor  # the token it appends


@dataclass
class _Beams:
    """Live beams of the sentences still being searched; beam rows are sentence-major (n·K)."""

    rows: Tensor  # (n,) original index of each active sentence
    limits: Tensor  # (n,) output length limit
    scores: Tensor  # (n, K) cumulative log-probabilities
    tokens: Tensor  # (n·K, t) tokens emitted so far
    n_finished: Tensor  # (n,) hypotheses finished so far
    threshold: Tensor  # (n,) score a hypothesis needs to enter the n-best; -inf until nbest finished

    def keep(self, index: Tensor) -> tuple[_Beams, Tensor]:
        """Only the sentences at ``index`` (n',); also returns their beam rows (n'·K,)."""
        k = self.scores.size(1)
        beam_rows = (index[:, None] * k + torch.arange(k, device=index.device)).view(-1)  # (n'·K,)
        kept = _Beams(
            self.rows[index],
            self.limits[index],
            self.scores[index],
            self.tokens[beam_rows],
            self.n_finished[index],
            self.threshold[index],
        )
        return kept, beam_rows


def _expand(scores: Tensor, logprobs: Tensor) -> _Candidates:
    """Score every one-token extension of every beam and keep the 2K best per sentence.

    scores: (n, K), logprobs: (n·K, V). 2K candidates always hold >= K non-EOS ones.
    """
    n, k = scores.shape
    vocab = logprobs.size(-1)
    total = logprobs.add_(scores.view(-1, 1)).view(n, k * vocab)  # (n, K·V), in place: it is large
    top, flat = total.topk(min(2 * k, k * vocab), dim=1)  # (n, 2K)
    return _Candidates(top, flat // vocab, flat % vocab)


def _add(finished: list[list[Hypothesis]], beams: _Beams, i: int, hypothesis: Hypothesis, nbest: int) -> None:
    """Record a finished hypothesis of active sentence ``i`` and update its n-best threshold."""
    hypotheses = finished[int(beams.rows[i])]
    hypotheses.append(hypothesis)
    beams.n_finished[i] += 1
    if len(hypotheses) >= nbest:
        beams.threshold[i] = sorted((h.score for h in hypotheses), reverse=True)[nbest - 1]


def _finish_eos(
    finished: list[list[Hypothesis]], beams: _Beams, cand: _Candidates, t: int, cfg: DecodeConfig
) -> None:
    """EOS candidates ranked within the top K end their beam (fairseq's rule)."""
    k = cfg.beam_size
    eos = (cand.tokens[:, :k] == EOS_ID) & torch.isfinite(cand.scores[:, :k])  # (n, K)
    if not eos.any():
        return
    normalised = (cand.scores[:, :k] / length_penalty(t + 1, cfg.length_penalty)).tolist()
    parents = cand.beams.tolist()
    for i, j in eos.nonzero().tolist():
        tokens = beams.tokens[i * k + parents[i][j]].tolist()
        _add(finished, beams, i, Hypothesis(tokens, normalised[i][j]), cfg.nbest)


def _prune(beams: _Beams, cand: _Candidates) -> tuple[_Beams, Tensor]:
    """The K best non-EOS candidates become the new beams; also returns each one's parent row (n·K,)."""
    n, k = beams.scores.shape
    width = cand.scores.size(1)
    rank = torch.arange(width, device=cand.tokens.device) + (cand.tokens == EOS_ID) * width  # EOS ranks last
    pick = rank.topk(k, dim=1, largest=False).indices  # (n, K), best first
    parents = (torch.arange(n, device=pick.device)[:, None] * k + cand.beams.gather(1, pick)).view(
        -1
    )  # (n·K,)
    tokens = torch.cat([beams.tokens[parents], cand.tokens.gather(1, pick).view(-1, 1)], dim=1)  # (n·K, t+1)
    return replace(beams, scores=cand.scores.gather(1, pick), tokens=tokens), parents


def _finish_at_limit(finished: list[list[Hypothesis]], beams: _Beams, t: int, cfg: DecodeConfig) -> Tensor:
    """Live beams of sentences that reached their length limit end without EOS; returns that mask (n,)."""
    at_limit = t + 1 >= beams.limits
    k = cfg.beam_size
    normalised = (beams.scores / length_penalty(t + 1, cfg.length_penalty)).tolist()
    for i in at_limit.nonzero().squeeze(1).tolist():
        for j in range(k):
            if normalised[i][j] > float("-inf"):
                _add(
                    finished,
                    beams,
                    i,
                    Hypothesis(beams.tokens[i * k + j].tolist(), normalised[i][j]),
                    cfg.nbest,
                )
    return at_limit


def _done(beams: _Beams, cfg: DecodeConfig) -> Tensor:
    """(n,) True where K hypotheses ended or no live beam can still enter the n-best.

    A live score s <= 0 can only fall, so its best normalised value is s / penalty(limit).
    """
    best_live = beams.scores.max(dim=1).values / length_penalty(beams.limits.float(), cfg.length_penalty)
    can_improve = (beams.n_finished < cfg.nbest) | (best_live > beams.threshold)
    return (beams.n_finished >= cfg.beam_size) | ~can_improve


@torch.inference_mode()
def beam_search(model: Transformer, src: Tensor, cfg: DecodeConfig) -> list[list[Hypothesis]]:
    """Up to ``cfg.nbest`` hypotheses per sentence, best first. src: (B, S) padded ids ending in EOS."""
    k, batch, device = cfg.beam_size, src.size(0), src.device
    memory, src_mask = model.encode(src)
    steps = CachedSteps(model, memory, src_mask)
    steps.select(
        torch.arange(batch, device=device).repeat_interleave(k)
    )  # (B·K) rows; K/V copied, not recomputed
    scores = torch.full((batch, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # the K beams start identical: keep one live copy
    beams = _Beams(
        rows=torch.arange(batch, device=device),
        limits=output_limits(src, cfg, model.cfg.max_positions),
        scores=scores,
        tokens=torch.empty(batch * k, 0, dtype=torch.long, device=device),
        n_finished=torch.zeros(batch, dtype=torch.long, device=device),
        threshold=torch.full((batch,), float("-inf"), device=device),
    )
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    last = torch.full((batch * k,), BOS_ID, dtype=torch.long, device=device)
    for t in range(int(beams.limits.max())):
        cand = _expand(beams.scores, next_log_probs(steps(last), t, cfg))
        _finish_eos(finished, beams, cand, t, cfg)
        beams, parents = _prune(beams, cand)
        active = ~(_finish_at_limit(finished, beams, t, cfg) | _done(beams, cfg))
        if not active.any():
            break
        if active.all():
            steps.reorder_beams(parents)
        else:
            beams, beam_rows = beams.keep(active.nonzero().squeeze(1))
            steps.select(parents[beam_rows])  # follow the beams and drop finished sentences in one gather
        last = beams.tokens[:, -1]
    return [sorted(hypotheses, key=lambda h: h.score, reverse=True)[: cfg.nbest] for hypotheses in finished]


@torch.inference_mode()
def generate(model: Transformer, src: Tensor, cfg: DecodeConfig) -> list[list[Hypothesis]]:
    """Translate a batch: greedy when ``cfg.beam_size == 1``, else beam search.

    src: (B, S) source ids ending in EOS, padded with PAD_ID. Returns, per sentence, up to
    ``cfg.nbest`` hypotheses, best first. The model should be in eval mode.
    """
    if cfg.beam_size == 1:
        return greedy_search(model, src, cfg)
    return beam_search(model, src, cfg)
