"""The checkpoint entry: its keys stay those older checkpoints have, and such checkpoints still load."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import torch
from tiny import tiny_tokenizer

from seq2seq.checkpoint import entry, load_model, resume_state, save_atomically
from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.model import Transformer

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


def test_the_entry_keeps_its_keys(tiny_model_cfg: ModelConfig) -> None:
    written = entry(tiny_model_cfg, DecodeConfig(), DataConfig(), tiny_tokenizer(), 3.0, ema=True)
    assert set(written) == ENTRY_KEYS
    assert (written["best_bleu"], written["weights_prefix"]) == (3.0, "ema_model.")
    assert entry(tiny_model_cfg, DecodeConfig(), DataConfig(), tiny_tokenizer())["weights_prefix"] == "model."


def test_a_swiglu_model_loads_back_as_written(tiny_model_cfg: ModelConfig, tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    cfg = replace(tiny_model_cfg, activation="swiglu", d_ff=43)
    torch.manual_seed(0)
    model = Transformer(cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    save_atomically(
        {"state_dict": state, "seq2seq": entry(cfg, DecodeConfig(), DataConfig(), tokenizer)},
        tmp_path / "m.ckpt",
    )
    loaded = load_model(tmp_path / "m.ckpt")
    assert loaded.model.cfg == cfg
    for name, weight in loaded.model.state_dict().items():
        torch.testing.assert_close(weight, model.state_dict()[name], rtol=0, atol=0)
