"""End to end on the tiny fixture: splits, tokenizer cache, batches, references."""

from __future__ import annotations

import gc
import logging
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from seq2seq.config import DataConfig
from seq2seq.data.cache import cache_root
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID


@pytest.fixture
def datamodule(tiny_data_cfg: DataConfig) -> TranslationDataModule:
    dm = TranslationDataModule(tiny_data_cfg, seed=0)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_splits_and_stats(datamodule: TranslationDataModule) -> None:
    splits = datamodule.splits
    assert set(splits) == {"train", "valid", "test"}
    assert set(splits["train"].column_names) == {"src_ids", "tgt_ids", "length"}  # the text is stored once
    assert set(datamodule.raw_splits["train"].column_names) == {"src", "tgt"}
    stats = datamodule.stats
    assert stats["malformed_lines"] == 0
    kept = stats["train_pairs"] + stats["valid_pairs"] + stats["test_pairs"]
    assert kept + stats["too_long_pairs"] == 300 and kept == sum(len(s) for s in splits.values())
    assert datamodule.tokenizer.src_vocab_size <= 300


def test_train_batch_shapes_and_specials(
    datamodule: TranslationDataModule, tiny_data_cfg: DataConfig
) -> None:
    loader = datamodule.train_dataloader()
    batches = list(loader)
    assert len(batches) == len(loader)
    assert sum(len(b.src) for b in batches) == datamodule.stats["train_pairs"]
    src, tgt_in, tgt_out = batches[0].src, batches[0].tgt_in, batches[0].tgt_out
    assert src.dtype == torch.long and tgt_in.shape == tgt_out.shape and len(src) == len(tgt_in)
    assert max(src.numel(), tgt_in.numel()) <= tiny_data_cfg.max_tokens
    assert torch.all(tgt_in[:, 0] == BOS_ID)
    assert torch.all((tgt_out == EOS_ID).sum(1) == 1) and torch.all((src == EOS_ID).sum(1) == 1)
    assert torch.equal((tgt_in != PAD_ID).sum(1), (tgt_out != PAD_ID).sum(1))
    shifted = tgt_in[:, 1:] != PAD_ID
    assert torch.equal(tgt_in[:, 1:][shifted], tgt_out[:, :-1][shifted])  # teacher forcing shift
    first = datamodule.tokenizer.decode_target(tgt_out[:1].tolist())[0]
    assert first in datamodule.raw_splits["train"]["tgt"][:]


def test_eval_loaders_cover_their_split(datamodule: TranslationDataModule) -> None:
    for name, loader in (("valid", datamodule.val_dataloader()), ("test", datamodule.test_dataloader())):
        assert sum(len(batch.src) for batch in loader) == len(datamodule.splits[name])


def test_second_setup_builds_nothing(
    datamodule: TranslationDataModule, tiny_data_cfg: DataConfig, caplog: pytest.LogCaptureFixture
) -> None:
    before = {path: path.stat().st_mtime_ns for path in cache_root(tiny_data_cfg).rglob("*")}
    again = TranslationDataModule(tiny_data_cfg, seed=0)
    with caplog.at_level(logging.INFO, logger="seq2seq.data"):
        again.prepare_data()
        again.setup("fit")
    assert not [r for r in caplog.records if "building" in r.getMessage()]
    assert {path: path.stat().st_mtime_ns for path in cache_root(tiny_data_cfg).rglob("*")} == before
    assert again.tokenizer.to_dict() == datamodule.tokenizer.to_dict()
    assert again.splits["train"]["src_ids"][:] == datamodule.splits["train"]["src_ids"][:]


def test_a_copied_corpus_reuses_every_cache(
    datamodule: TranslationDataModule, tiny_data_cfg: DataConfig, tmp_path: Path
) -> None:
    """Cache names come from the corpus bytes, not its path: a copy on node-local scratch loads."""
    copy = tmp_path / "scratch" / "pairs.tsv"
    copy.parent.mkdir()
    shutil.copy(tiny_data_cfg.path, copy)
    before = sorted(path.name for path in cache_root(tiny_data_cfg).iterdir())
    moved = TranslationDataModule(replace(tiny_data_cfg, path=str(copy)))
    moved.setup("fit")
    assert sorted(path.name for path in cache_root(tiny_data_cfg).iterdir()) == before
    edited = tmp_path / "scratch" / "edited.tsv"
    edited.write_text(copy.read_text() + "One more.\tUna más.\n")
    TranslationDataModule(replace(tiny_data_cfg, path=str(edited))).setup("fit")
    assert len(list(cache_root(tiny_data_cfg).glob("corpus-*"))) == 2


def test_tokenizer_cache_follows_config(datamodule: TranslationDataModule, tiny_data_cfg: DataConfig) -> None:
    separate = TranslationDataModule(replace(tiny_data_cfg, shared_vocab=False, vocab_size=280))
    separate.setup("fit")
    assert not separate.tokenizer.shared and separate.tokenizer.tgt_vocab_size == 280
    assert len(list(cache_root(tiny_data_cfg).glob("tokenizer-*"))) == 2


def test_a_large_train_split_trains_the_tokenizer_on_a_spread_sample(
    datamodule: TranslationDataModule, tiny_data_cfg: DataConfig, caplog: pytest.LogCaptureFixture
) -> None:
    sampled = TranslationDataModule(replace(tiny_data_cfg, tokenizer_max_pairs=50))
    with caplog.at_level(logging.INFO, logger="seq2seq.data"):
        sampled.setup("fit")
    assert "training a 300-token BPE tokenizer on 50 pairs" in caplog.text
    assert sampled.tokenizer.to_dict() != datamodule.tokenizer.to_dict()
    assert len(list(cache_root(tiny_data_cfg).glob("tokenizer-*"))) == 2


def test_references_are_grouped(datamodule: TranslationDataModule) -> None:
    sources, refs = datamodule.references("valid")
    assert len(sources) == len(set(sources)) == len(refs) == 12
    assert sum(map(len, refs)) == len(datamodule.raw_splits["valid"])
    train_sources = set(datamodule.raw_splits["train"]["src"][:])
    assert not train_sources & set(sources)


def test_too_long_pairs_are_dropped_and_counted(
    tiny_data_cfg: DataConfig, caplog: pytest.LogCaptureFixture
) -> None:
    dm = TranslationDataModule(replace(tiny_data_cfg, max_length=8))
    with caplog.at_level(logging.INFO, logger="seq2seq.data"):
        dm.setup("fit")
    assert dm.stats["too_long_pairs"] > 0
    kept = sum(len(split) for split in dm.splits.values())
    assert kept + dm.stats["too_long_pairs"] == 300
    for split in dm.splits.values():
        assert all(len(ids) <= 8 for ids in split["src_ids"][:] + split["tgt_ids"][:])
    share = dm.stats["too_long_train_share"]
    assert share == dm.stats["too_long_train_pairs"] / len(dm.raw_splits["train"]) > 0.01
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert f"({100 * share:.2f}%) exceed data.max_length=8 tokens and are dropped" in warning.getMessage()


def test_too_long_pairs_can_be_truncated_instead(tiny_data_cfg: DataConfig) -> None:
    dropped = TranslationDataModule(replace(tiny_data_cfg, max_length=8))
    dropped.setup("fit")
    cut = TranslationDataModule(replace(tiny_data_cfg, max_length=8, too_long="truncate"))
    cut.setup("fit")
    assert cut.stats["too_long_train_pairs"] == dropped.stats["too_long_train_pairs"] > 0
    assert len(cut.splits["train"]) == len(cut.raw_splits["train"])  # every pair kept
    batches = list(cut.train_dataloader())
    assert sum(len(batch.src) for batch in batches) == len(cut.raw_splits["train"])
    assert max(max(batch.src.shape[1], batch.tgt_in.shape[1]) for batch in batches) == 8 + 1


def test_worker_loader_matches_in_process(tiny_data_cfg: DataConfig) -> None:
    in_process = TranslationDataModule(tiny_data_cfg)
    in_process.setup("fit")
    workers = TranslationDataModule(replace(tiny_data_cfg, num_workers=1))
    workers.setup("fit")
    gc.unfreeze()
    in_process.train_dataloader()
    assert gc.get_freeze_count() == 0  # no worker, nothing to keep shared
    loader = workers.train_dataloader()  # evaluation loads in process whatever num_workers says
    assert gc.get_freeze_count() > 0  # the worker's fork shares what the collector leaves alone
    gc.unfreeze()
    assert loader.persistent_workers
    for a, b in zip(in_process.train_dataloader(), loader, strict=True):
        assert all(torch.equal(x, y) if torch.is_tensor(x) else x == y for x, y in zip(a, b, strict=True))


def test_ranks_of_an_attached_trainer_get_disjoint_shards(datamodule: TranslationDataModule) -> None:
    seen = []
    for rank in range(2):
        fit_loop = SimpleNamespace(restarting=False)
        strategy = SimpleNamespace(root_device=torch.device("cpu"))
        datamodule.trainer = SimpleNamespace(
            world_size=2, global_rank=rank, fit_loop=fit_loop, strategy=strategy
        )
        sampler = datamodule.train_dataloader().batch_sampler
        assert (sampler.rank, sampler.world_size) == (rank, 2)
        seen.append([i for batch in sampler for i in batch])
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(len(datamodule.splits["train"])))
