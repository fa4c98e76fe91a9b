"""A tiny model trained in seconds on ``fixtures/tiny.tsv``, saved as training saves a checkpoint.

Random weights make next-token distributions nearly flat, so two correct decoders can part on
near-ties; a trained model has the clear margins of a real one. This trains the ``tiny`` sizes on
every pair of the fixture, in batches of similar length, without Lightning.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from seq2seq.config import DecodeConfig, ModelConfig
from seq2seq.data.batching import pad_ids
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.formats.checkpoint import seq2seq_entry
from seq2seq.model import Transformer
from seq2seq.training.module import MODEL_PREFIX
from tests.helpers.compose import data_config, model_config
from tests.helpers.tiny import CORPUS, tiny_tokenizer

MEMORISED_PAIRS = 40  # the fixture's first pairs, which conftest's memorised_ckpt learns by heart


def train_tiny_checkpoint(
    directory: Path,
    steps: int = 150,
    batch_size: int = 50,
    seed: int = 0,
    pairs: int | None = None,
    **model_changes: Any,
) -> Path:
    """Train the tiny model (with ``model_changes`` to its config, e.g. ``norm_first=True``) on the
    fixture (its first ``pairs`` pairs, or all) and write ``directory/tiny.ckpt``; returns its path."""
    model_cfg = replace(model_config("tiny"), **model_changes)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices this small: a second thread costs more than it does
    try:
        return _train(directory, steps, batch_size, seed, pairs, model_cfg)
    finally:
        torch.set_num_threads(threads)


def _train(
    directory: Path, steps: int, batch_size: int, seed: int, limit: int | None, model_cfg: ModelConfig
) -> Path:
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()][:limit]
    tokenizer = tiny_tokenizer()
    src_ids = tokenizer.encode_source([s for s, _ in pairs])
    tgt_ids = tokenizer.encode_target([t for _, t in pairs])
    order = sorted(range(len(pairs)), key=lambda i: len(src_ids[i]) + len(tgt_ids[i]))
    batches = []  # similar lengths together, so little of each batch is padding
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        src = pad_ids([[*src_ids[i], EOS_ID] for i in rows])  # (batch, S)
        tgt_in = pad_ids([[BOS_ID, *tgt_ids[i]] for i in rows])  # (batch, T)
        tgt_out = pad_ids([[*tgt_ids[i], EOS_ID] for i in rows])  # (batch, T)
        batches.append((src, tgt_in, tgt_out))
    torch.manual_seed(seed)
    model = Transformer(model_cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        src, tgt_in, tgt_out = batches[int(torch.randint(len(batches), ()))]
        logits = model(src, tgt_in)  # (batch, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    data_cfg = replace(
        data_config("tiny"), path=str(CORPUS), valid_size=12, test_size=12, max_tokens=512, num_workers=0,
        cache_dir=str(directory / "cache"),
    )  # fmt: skip
    state = {MODEL_PREFIX + name: tensor for name, tensor in model.state_dict().items()}
    meta = seq2seq_entry(model_cfg, DecodeConfig(), data_cfg, tokenizer, MODEL_PREFIX)
    path = directory / "tiny.ckpt"
    torch.save({"state_dict": state, "seq2seq": meta, "final_loss": loss.item()}, path)
    return path
