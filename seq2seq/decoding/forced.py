"""Forced decoding: the score a search would give an output it is handed, so that one model can
judge another decoder's choice (a near tie, or a worse translation?)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from seq2seq.config import DecodeConfig
from seq2seq.decoding.steps import length_penalty, output_limits
from seq2seq.model import Transformer


@torch.inference_mode()
def forced_scores(
    model: Transformer, src: Tensor, outputs: list[list[int]], cfg: DecodeConfig
) -> list[float]:
    """Each output's length-normalised log-probability under ``model``, as the searches score it.

    src: (B, S) padded ids ending in EOS; ``outputs``: B lists of target ids without BOS or EOS, as a
    :class:`~seq2seq.decoding.steps.Hypothesis` holds them. An output shorter than its length limit
    ended with EOS, whose log-probability counts; one at the limit stopped there. The searches
    never emit PAD or BOS, or EOS before ``cfg.min_len``; an output that does is scored as if allowed.
    """
    limits = output_limits(src, cfg, model.cfg.max_positions, model.pad_id).tolist()
    emitted = [
        torch.tensor([*ids, model.eos_id] if len(ids) < limit else ids, dtype=torch.long, device=src.device)
        for ids, limit in zip(outputs, limits, strict=True)
    ]
    bos = torch.tensor([model.bos_id], dtype=torch.long, device=src.device)
    tgt_in = pad_sequence([torch.cat([bos, ids[:-1]]) for ids in emitted], True, model.pad_id)  # (B, T)
    tgt_out = pad_sequence(emitted, True, model.pad_id)  # (B, T)
    logprobs = model(src, tgt_in).float().log_softmax(dim=-1)  # (B, T, V)
    picked = logprobs.gather(-1, tgt_out[..., None])[..., 0]  # (B, T)
    totals = picked.masked_fill(tgt_out == model.pad_id, 0.0).sum(dim=1).tolist()  # (B,): pads add nothing
    return [
        total / length_penalty(len(ids), cfg.length_penalty)
        for total, ids in zip(totals, emitted, strict=True)
    ]
