"""Shared test fixtures: the tiny corpus and model configs, and a real tiny checkpoint file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from compose import model_config
from tiny import BLEU, CORPUS, STEP, tiny_tokenizer
from trained import train_tiny_checkpoint

from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.inference.cli import main
from seq2seq.inference.translator import Translator
from seq2seq.model import Transformer
from seq2seq.training.checkpoint import MODEL_PREFIX, entry, save_atomically


@pytest.fixture
def tiny_data_cfg(tmp_path: Path) -> DataConfig:
    """DataConfig for ``fixtures/tiny.tsv`` (300 pairs) with its cache under ``tmp_path``."""
    return DataConfig(
        path=str(CORPUS),
        valid_size=12,
        test_size=12,
        vocab_size=300,
        max_tokens=512,
        eval_max_tokens=1024,
        num_workers=0,
        cache_dir=str(tmp_path / "cache"),
    )


@pytest.fixture(scope="session")
def tiny_model_cfg() -> ModelConfig:
    """``configs/model/tiny.yaml``: the model the ``tiny`` experiment trains."""
    return model_config("tiny")


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_model_cfg: ModelConfig) -> Path:
    """A checkpoint with a real tokenizer and random weights, written as training writes one."""
    tmp = tmp_path_factory.mktemp("ckpt")
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    model = Transformer(tiny_model_cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    data_cfg = DataConfig(
        path=str(CORPUS),
        valid_size=12,
        test_size=12,
        vocab_size=300,
        max_tokens=512,
        cache_dir=str(tmp / "cache"),
    )
    decode_cfg = DecodeConfig(beam_size=2, max_len_a=1.0, max_len_b=4, min_len=1)  # min_len: never ""
    path = tmp / "tiny.ckpt"
    state = {MODEL_PREFIX + name: tensor for name, tensor in model.state_dict().items()}
    save_atomically(
        {
            "state_dict": state,
            "global_step": STEP,
            "seq2seq": entry(tiny_model_cfg, decode_cfg, data_cfg, tokenizer, best_bleu=BLEU),
        },
        path,
    )
    return path


@pytest.fixture(scope="module")
def translator(checkpoint: Path) -> Translator:
    return Translator.from_checkpoint(checkpoint, device="cpu")


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture) -> Callable[..., tuple[int, list[str], str]]:
    """Runs ``translate.py``'s main in-process: returns (exit code, stdout lines, stderr)."""

    def run(*argv: str) -> tuple[int, list[str], str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out.splitlines(), captured.err

    return run


@pytest.fixture(scope="session")
def trained_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the tiny model trained on ``fixtures/tiny.tsv`` (see ``trained.py``)."""
    return train_tiny_checkpoint(tmp_path_factory.mktemp("trained"))
