"""Decoding: greedy search and sampling (:mod:`.greedy`), beam search (:mod:`.beam`) and the
pieces they share (:mod:`.steps`, :mod:`.scorers`), all over the model's ``encode`` and cached
``step``."""

from __future__ import annotations

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.beam import beam_search
from seq2seq.decoding.captured_steps import Decoders
from seq2seq.decoding.constrained import constrained_search
from seq2seq.decoding.greedy import greedy_search
from seq2seq.decoding.scorers import Models, prefix_tensor
from seq2seq.decoding.steps import Hypothesis

__all__ = ["Hypothesis", "beam_search", "constrained_search", "generate", "greedy_search"]


@torch.inference_mode()
def generate(
    model: Models,
    src: Tensor,
    cfg: DecodeConfig,
    candidates: Tensor | None = None,
    prefixes: list[list[int]] | None = None,
    constraints: list[list[list[int]]] | None = None,
    constraints_in_order: bool = False,
    decoders: Decoders | None = None,
) -> list[list[Hypothesis]]:
    """Translate a batch: greedy when ``cfg.beam_size == 1``, else beam search (constrained when any
    sentence has ``constraints``).

    src: (B, S) source ids ending in EOS, padded with the model's pad id. ``model`` is one model, or
    several sharing a vocabulary (an ensemble). Returns, per sentence, up to ``cfg.nbest``
    hypotheses, best first, prefix included. The models should be in eval mode. ``candidates`` (C,),
    sorted vocabulary ids that include the special ones, restricts the output to those types (a
    shortlist; prefix and constraint types join it). ``prefixes``: B lists of target ids each output
    starts with; ``constraints``: B lists of target phrases each output must contain (beam search),
    in the order given when ``constraints_in_order``. ``decoders``: the caller's captured decoders,
    for ``cfg.capture`` (see :func:`~seq2seq.decoding.scorers.start_steps`).
    """
    constrained = constraints is not None and any(constraints)
    if constrained and (cfg.beam_size == 1 or cfg.sampling):
        raise ValueError("constraints need beam search")
    if constrained and candidates is not None:
        phrase_ids = [t for phrases in constraints for phrase in phrases for t in phrase]
        candidates = torch.cat([candidates, torch.tensor(phrase_ids, device=candidates.device)]).unique()
    forced = None
    if prefixes is not None and any(prefixes):
        candidates, forced = prefix_tensor(prefixes, candidates, src.device)
    if constrained:
        if candidates is not None:  # the phrases as positions in the shortlist
            ids = candidates.tolist()
            position = {i: p for p, i in enumerate(ids)}
            constraints = [[[position[t] for t in phrase] for phrase in phrases] for phrases in constraints]
        return constrained_search(model, src, cfg, constraints, candidates, forced, constraints_in_order)
    if cfg.beam_size == 1:
        return greedy_search(model, src, cfg, candidates=candidates, prefixes=forced, decoders=decoders)
    return beam_search(model, src, cfg, candidates, forced, decoders)
