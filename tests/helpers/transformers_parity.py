"""What the transformers export tests compare: the fixture's sources, our and transformers' logits on
the same batch, and checkpoints of other model shapes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import pad_ids
from seq2seq.data.tokenizers.tokenizer import BOS_ID, PAD_ID
from seq2seq.formats.checkpoint import load_model, save_atomically, seq2seq_entry
from seq2seq.inference.translator import Translator
from seq2seq.model import Transformer
from seq2seq.training.module import MODEL_PREFIX
from tests.helpers.tiny import CORPUS

SOURCES = [line.split("\t")[0] for line in CORPUS.read_text(encoding="utf-8").splitlines()][:60]


def teacher_forced_logits(model, ours: Translator, sources: list[str]) -> tuple[torch.Tensor, ...]:
    """(ours, theirs, mask) of the logits for our greedy outputs, on the real (non-pad) positions."""
    encoded = ours.encode(sources)
    src = pad_ids(encoded)
    tgt = pad_ids([[BOS_ID, *best[0].tokens] for best in ours.search(encoded, ours.decode_cfg_with(beam=1))])
    tgt = tgt[:, : ours.max_positions]  # a sentence that ran to its limit has one position too many
    with torch.inference_mode():
        mine = ours.model(src, tgt)
        theirs = model(
            input_ids=src,
            attention_mask=src != PAD_ID,
            decoder_input_ids=tgt,
            decoder_attention_mask=tgt != PAD_ID,
        ).logits
    return mine, theirs, tgt != PAD_ID


def variant_checkpoint(directory: Path, trained_ckpt: Path, **changes) -> Path:
    """The trained checkpoint's tokenizer and configs with model config ``changes``, random weights."""
    loaded = load_model(trained_ckpt)
    cfg = replace(loaded.model.cfg, **changes)
    torch.manual_seed(0)
    model = Transformer(cfg, loaded.tokenizer.src_vocab_size, loaded.tokenizer.tgt_vocab_size)
    for module in model.modules():  # away from the init values, so a misplaced norm or table shows
        if isinstance(module, torch.nn.LayerNorm):
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)
        if isinstance(module, torch.nn.RMSNorm):  # QK-norm gains
            module.weight.data.uniform_(0.5, 1.5)
        if getattr(module, "positions", None) is not None:  # learned positions start at zero
            module.positions.data.normal_()
    meta = seq2seq_entry(cfg, DecodeConfig(), loaded.data_config, loaded.tokenizer, MODEL_PREFIX)
    state = {MODEL_PREFIX + name: tensor for name, tensor in model.state_dict().items()}
    path = directory / "variant.ckpt"
    save_atomically({"state_dict": state, "seq2seq": meta}, path)
    return path
