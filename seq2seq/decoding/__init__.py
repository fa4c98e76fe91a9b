"""Decoding: greedy search and sampling (:mod:`.greedy`), beam search (:mod:`.beam`) and the
pieces they share (:mod:`.steps`), all over the model's ``encode`` and cached ``step``."""

from __future__ import annotations

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.beam import beam_search
from seq2seq.decoding.greedy import greedy_search
from seq2seq.decoding.steps import Hypothesis
from seq2seq.model import Transformer

__all__ = ["Hypothesis", "beam_search", "generate", "greedy_search"]


@torch.inference_mode()
def generate(
    model: Transformer, src: Tensor, cfg: DecodeConfig, candidates: Tensor | None = None
) -> list[list[Hypothesis]]:
    """Translate a batch: greedy when ``cfg.beam_size == 1``, else beam search.

    src: (B, S) source ids ending in EOS, padded with the model's pad id. Returns, per sentence, up to
    ``cfg.nbest`` hypotheses, best first. The model should be in eval mode. ``candidates`` (C,), sorted
    vocabulary ids that include the special ones, restricts the output to those types (a shortlist).
    """
    if cfg.beam_size == 1:
        return greedy_search(model, src, cfg, candidates=candidates)
    return beam_search(model, src, cfg, candidates)
