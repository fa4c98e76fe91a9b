"""Shared test fixtures: a small real corpus configured to build in about a second."""

from __future__ import annotations

from pathlib import Path

import pytest
from trained import train_tiny_checkpoint

from seq2seq.config import DataConfig

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def tiny_data_cfg(tmp_path: Path) -> DataConfig:
    """DataConfig for ``fixtures/tiny.tsv`` (300 pairs) with its cache under ``tmp_path``."""
    return DataConfig(
        path=str(FIXTURES / "tiny.tsv"),
        valid_size=12,
        test_size=12,
        vocab_size=300,
        max_tokens=512,
        eval_max_tokens=1024,
        num_workers=0,
        cache_dir=str(tmp_path / "cache"),
    )


@pytest.fixture(scope="session")
def trained_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the tiny model trained on ``fixtures/tiny.tsv`` (see ``trained.py``)."""
    return train_tiny_checkpoint(tmp_path_factory.mktemp("trained"))
