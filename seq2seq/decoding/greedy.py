"""Greedy search (and sampling) over ``encode`` and the cached ``step``.

The encoder and every layer's cross-attention keys/values run once per source. A sentence
that finishes leaves the active batch at once (its cache rows are dropped with
``index_select``), so one long sentence does not make the short ones in its batch pay for
its extra steps.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.captured_steps import Decoders
from seq2seq.decoding.sampling import pick_next_tokens
from seq2seq.decoding.scorers import Models, Scorer, start_steps
from seq2seq.decoding.steps import FullSteps, Hypothesis, length_penalty, output_limits
from seq2seq.model import Transformer


@torch.inference_mode()
def greedy_search(
    model: Models,
    src: Tensor,
    cfg: DecodeConfig,
    cached: bool = True,
    candidates: Tensor | None = None,
    prefixes: Tensor | None = None,
    decoders: Decoders | None = None,
) -> list[list[Hypothesis]]:
    """One hypothesis per sentence. src: (B, S) ids ending in EOS, padded with the model's pad id.

    ``model``: one model or an ensemble's. ``cached=False`` re-runs the full decoder of one model each
    step; it exists to test and time the cache. ``candidates`` (C,): the vocabulary types the output
    may use (see :class:`CachedSteps`); ``prefixes`` (B, P): forced first tokens; ``decoders``:
    captured ones (both: see :func:`start_steps`).
    """
    if cached:
        steps: Scorer
        steps, limits = start_steps(model, src, cfg, candidates, prefixes, decoders)
    elif isinstance(model, Transformer) and candidates is None and prefixes is None:
        memory, src_mask = model.encode(src)
        limits = output_limits(src, cfg, model.cfg.max_positions, model.pad_id)  # (B,)
        steps = FullSteps(model, memory, src_mask)
    else:
        raise ValueError("an ensemble, a shortlist or a prefix needs the cached steps")
    special = steps.special
    batch, device = src.size(0), src.device
    rows = torch.arange(batch, device=device)  # original sentence of each active row
    out = torch.full((batch, int(limits.max())), special.pad, dtype=torch.long, device=device)
    logp = torch.zeros(batch, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    tokens = torch.full((batch,), special.bos, dtype=torch.long, device=device)
    for t in range(out.size(1)):
        tokens, token_logp = pick_next_tokens(steps.log_probs(tokens, t, cfg), cfg)
        logp[rows] += token_logp
        out[rows, t] = tokens
        done = (tokens == special.eos) | (t + 1 >= limits[rows])
        if done.any():
            lengths[rows[done]] = t + 1
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            rows, tokens = rows[keep], tokens[keep]
            steps.select(keep)
    scores = logp / length_penalty(lengths.float(), cfg.length_penalty)
    return [
        [Hypothesis(steps.vocabulary_ids(_strip_eos(row[:n], special.eos)), score)]
        for row, n, score in zip(out.tolist(), lengths.tolist(), scores.tolist(), strict=True)
    ]


def _strip_eos(tokens: list[int], eos_id: int) -> list[int]:
    return tokens[:-1] if tokens and tokens[-1] == eos_id else tokens
