"""What a checkpoint carries so inference needs nothing but the file.

Lightning checkpoints get one extra entry, ``checkpoint["seq2seq"]``, holding the model
config, the vocabulary sizes, the decoding settings used for validation and the
tokenizer as JSON. Everything is plain data and tensors, so it loads with
``torch.load(weights_only=True)``: a checkpoint cannot run code on load.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.data.tokenizer import PAD_ID, TranslationTokenizer
from seq2seq.model import Transformer

KEY = "seq2seq"
MODEL_PREFIX = "model."  # the LightningModule keeps the Transformer at `self.model` (or `ema_model`)


class CheckpointError(RuntimeError):
    """The file is missing, unreadable, or not a seq2seq checkpoint."""


def inference_state(
    model_cfg: ModelConfig, decode_cfg: DecodeConfig, data_cfg: DataConfig, tokenizer: TranslationTokenizer
) -> dict:
    """The ``checkpoint["seq2seq"]`` entry; the data config lets evaluation rebuild the splits."""
    return {
        "model_config": asdict(model_cfg),
        "decode_config": asdict(decode_cfg),
        "data_config": asdict(data_cfg),
        "tokenizer": tokenizer.to_dict(),
        "src_vocab_size": tokenizer.src_vocab_size,
        "tgt_vocab_size": tokenizer.tgt_vocab_size,
    }


@dataclass
class LoadedModel:
    """A ready-to-run model with its tokenizer, validation decoding settings and training data config."""

    model: Transformer
    tokenizer: TranslationTokenizer
    decode_config: DecodeConfig
    data_config: DataConfig
    global_step: int | None = None  # optimiser steps trained; None for a file not written by training
    best_bleu: float | None = None  # the best validation BLEU when it was written


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """``torch.load`` of tensors and plain data only; every failure becomes :class:`CheckpointError`."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # truncated zip, pickle error, wrong file type: all mean "unreadable"
        raise CheckpointError(f"cannot read checkpoint {path}: {str(err).splitlines()[0]}") from err
    if not isinstance(checkpoint, dict) or KEY not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path} is not a seq2seq checkpoint (no model config/tokenizer inside)")
    return checkpoint


def load_model(path: str | Path, map_location: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild the Transformer and tokenizer from a checkpoint, in eval mode."""
    checkpoint = read_checkpoint(path, map_location)
    meta = checkpoint[KEY]
    try:
        model_cfg = ModelConfig(**meta["model_config"])
        decode_cfg = DecodeConfig(**meta["decode_config"])
        data_cfg = DataConfig(**meta["data_config"])
        tokenizer = TranslationTokenizer.from_dict(meta["tokenizer"])
        vocab_sizes = meta["src_vocab_size"], meta["tgt_vocab_size"]
    except Exception as err:  # another version's or a hand-edited entry; tokenizers raises bare Exception
        raise CheckpointError(f"{path}: unusable seq2seq entry ({type(err).__name__}: {err})") from err
    if (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size) != vocab_sizes:
        raise CheckpointError(
            f"{path}: its tokenizer ({tokenizer.src_vocab_size}/{tokenizer.tgt_vocab_size} tokens) does not "
            f"belong to its model ({vocab_sizes[0]}/{vocab_sizes[1]})"
        )
    model = Transformer(model_cfg, *vocab_sizes, PAD_ID)
    prefix = meta.get("weights_prefix", MODEL_PREFIX)  # the validated weights: EMA when trained with it
    weights = {
        name[len(prefix) :]: tensor
        for name, tensor in checkpoint["state_dict"].items()
        if name.startswith(prefix)
    }
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise CheckpointError(
            f"{path}: weights do not match its model config: {str(err).splitlines()[0]}"
        ) from err
    return LoadedModel(
        model.to(map_location).eval(),
        tokenizer,
        decode_cfg,
        data_cfg,
        checkpoint.get("global_step"),
        meta.get("best_bleu"),
    )
