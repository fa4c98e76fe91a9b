"""A tiny checkpoint file, saved the way training saves one, for tests that need a model on disk."""

from __future__ import annotations

from pathlib import Path

import torch

from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.data.tokenizer import PAD_ID, TranslationTokenizer
from seq2seq.model import Transformer
from seq2seq.training.checkpoint import inference_state

CORPUS = Path(__file__).parent / "fixtures" / "tiny.tsv"
STEP, BLEU = 7, 12.34  # what the file claims about its training, for the startup line and /info


def write_tiny_checkpoint(directory: Path) -> Path:
    """Real tokenizer, random seeded weights, 2+2 layers x 4 heads; min_len 1: never "" for a sentence."""
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    tokenizer = TranslationTokenizer.train(
        (s for s, _ in pairs), (t for _, t in pairs), vocab_size=300, shared=True
    )
    torch.manual_seed(0)
    model_cfg = ModelConfig(
        d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=64, max_positions=64
    )
    model = Transformer(model_cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, PAD_ID)
    data_cfg = DataConfig(path=str(CORPUS), valid_size=12, test_size=12, vocab_size=300, max_tokens=512)
    decode_cfg = DecodeConfig(beam_size=2, max_len_a=1.0, max_len_b=4, min_len=1)
    meta = inference_state(model_cfg, decode_cfg, data_cfg, tokenizer)
    meta["best_bleu"] = BLEU
    path = directory / "tiny.ckpt"
    state = {f"model.{name}": tensor for name, tensor in model.state_dict().items()}
    torch.save({"state_dict": state, "global_step": STEP, "seq2seq": meta}, path)
    return path
