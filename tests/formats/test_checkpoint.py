"""The checkpoint entry: its keys stay those older checkpoints have, and such checkpoints still load."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import torch

from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.formats.checkpoint import (
    load_model,
    read_checkpoint,
    resume_state,
    save_atomically,
    seq2seq_entry,
)
from seq2seq.model import Transformer
from seq2seq.training.module import EMA_PREFIX, MODEL_PREFIX
from tests.helpers.tiny import tiny_tokenizer

ENTRY_KEYS = {  # what checkpoints written by earlier versions carry under checkpoint["seq2seq"]
    "model_config",
    "decode_config",
    "data_config",
    "tokenizer",
    "src_vocab_size",
    "tgt_vocab_size",
    "best_bleu",
    "weights_prefix",
}


def test_an_entry_in_the_layout_of_older_checkpoints_loads(tiny_model_cfg: ModelConfig, tmp_path: Path):
    tokenizer = tiny_tokenizer()
    vocab = tokenizer.src_vocab_size
    torch.manual_seed(0)
    trained, averaged = Transformer(tiny_model_cfg, vocab, vocab), Transformer(tiny_model_cfg, vocab, vocab)
    state = {f"model.{k}": v for k, v in trained.state_dict().items()}
    state |= {f"ema_model.{k}": v for k, v in averaged.state_dict().items()}
    old_model_config = asdict(tiny_model_cfg)
    del old_model_config["activation"]  # written before the FFN activation was a choice: ReLU
    old_entry = {
        "model_config": old_model_config,
        "decode_config": asdict(DecodeConfig(beam_size=3)),
        "data_config": asdict(DataConfig(eval_max_tokens=8192)),
        "tokenizer": tokenizer.to_dict(),
        "src_vocab_size": vocab,
        "tgt_vocab_size": vocab,
        "best_bleu": 12.5,
        "weights_prefix": "ema_model.",
    }
    checkpoint = {"state_dict": state, "seq2seq": old_entry}
    save_atomically(checkpoint, tmp_path / "old.ckpt")
    loaded = load_model(tmp_path / "old.ckpt")
    assert loaded.decode_config.beam_size == 3 and loaded.data_config.eval_max_tokens == 8192
    assert loaded.model.cfg.activation == "relu"
    for name, weight in loaded.model.state_dict().items():  # the moving average, as validated
        torch.testing.assert_close(weight, averaged.state_dict()[name], rtol=0, atol=0)
    resumed = resume_state(checkpoint)
    assert resumed.best_bleu == 12.5 and resumed.tokenizer.to_dict() == tokenizer.to_dict()


def test_training_stores_the_run_config_once(trained_ckpt: Path) -> None:
    """In the entry only: Lightning's copy of the hyperparameters is not written."""
    checkpoint = read_checkpoint(trained_ckpt)
    assert set(checkpoint["seq2seq"]) == ENTRY_KEYS and "hyper_parameters" not in checkpoint


def test_a_checkpoint_with_lightnings_copy_of_the_config_still_loads(trained_ckpt: Path, tmp_path: Path):
    """Checkpoints written before the config was stored once also carry it as Lightning's hyperparameters."""
    checkpoint = read_checkpoint(trained_ckpt)
    meta = checkpoint["seq2seq"]
    checkpoint["hyper_parameters"] = {
        "model": meta["model_config"],
        "optim": {"lr": 0.003},
        "decode": meta["decode_config"],
        "data": meta["data_config"],
        "src_vocab_size": meta["src_vocab_size"],
        "tgt_vocab_size": meta["tgt_vocab_size"],
        "skip_nonfinite": False,
    }
    save_atomically(checkpoint, tmp_path / "older.ckpt")
    loaded, today = load_model(tmp_path / "older.ckpt"), load_model(trained_ckpt)
    assert loaded.model.cfg == today.model.cfg and loaded.decode_config == today.decode_config
    for name, weight in loaded.model.state_dict().items():
        torch.testing.assert_close(weight, today.model.state_dict()[name], rtol=0, atol=0)
    assert resume_state(checkpoint).best_bleu == meta["best_bleu"]


def test_the_entry_keeps_its_keys(tiny_model_cfg: ModelConfig) -> None:
    written = seq2seq_entry(tiny_model_cfg, DecodeConfig(), DataConfig(), tiny_tokenizer(), EMA_PREFIX, 3.0)
    assert set(written) == ENTRY_KEYS
    assert (written["best_bleu"], written["weights_prefix"]) == (3.0, "ema_model.")
    raw = seq2seq_entry(tiny_model_cfg, DecodeConfig(), DataConfig(), tiny_tokenizer(), MODEL_PREFIX)
    assert raw["weights_prefix"] == "model."


def test_a_swiglu_model_loads_back_as_written(tiny_model_cfg: ModelConfig, tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    cfg = replace(tiny_model_cfg, activation="swiglu", d_ff=43)
    torch.manual_seed(0)
    model = Transformer(cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    meta = seq2seq_entry(cfg, DecodeConfig(), DataConfig(), tokenizer, MODEL_PREFIX)
    save_atomically({"state_dict": state, "seq2seq": meta}, tmp_path / "m.ckpt")
    loaded = load_model(tmp_path / "m.ckpt")
    assert loaded.model.cfg == cfg
    for name, weight in loaded.model.state_dict().items():
        torch.testing.assert_close(weight, model.state_dict()[name], rtol=0, atol=0)
