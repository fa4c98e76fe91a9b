"""LightningDataModule: corpus -> grouped splits -> tokenizer -> ids -> token-budget loaders.

Every expensive step is cached under ``cfg.cache_dir`` with a key derived from its
inputs (corpus identity, split seed and sizes, tokenizer config), so a second run
re-trains and re-encodes nothing, and a changed input never reuses a stale cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from functools import partial
from itertools import chain
from pathlib import Path

import datasets
import numpy as np
import pytorch_lightning as pl
from torch.utils.data import DataLoader

from seq2seq.config import DataConfig
from seq2seq.data import corpus
from seq2seq.data.batching import TokenBudgetBatchSampler, collate, pair_lengths
from seq2seq.data.cache import build_into_place, digest
from seq2seq.data.resume import BatchOrder
from seq2seq.data.tokenizer import TranslationTokenizer, config_key

log = logging.getLogger("seq2seq.data")

_ENCODED = datasets.Features(
    {
        "src": datasets.Value("string"),
        "tgt": datasets.Value("string"),
        "src_ids": datasets.List(datasets.Value("int32")),
        "tgt_ids": datasets.List(datasets.Value("int32")),
        "length": datasets.Value("int32"),  # padded cost of the pair, see batching.pair_lengths
    }
)


def _encode_batch(batch: dict, tokenizer: TranslationTokenizer) -> dict:
    src_ids = tokenizer.encode_source(batch["src"])
    tgt_ids = tokenizer.encode_target(batch["tgt"])
    lengths = pair_lengths(np.array([len(x) for x in src_ids]), np.array([len(y) for y in tgt_ids]))
    return {"src_ids": src_ids, "tgt_ids": tgt_ids, "length": lengths}


def _lengths(dataset: datasets.Dataset) -> np.ndarray:
    """The ``length`` column as an array, shape (N,), without building Python objects."""
    return dataset.with_format("arrow")["length"].to_numpy()


def _texts(dataset: datasets.Dataset, column: str) -> Iterator[str]:
    """Stream one text column in Arrow batches instead of materialising it."""
    return chain.from_iterable(batch[column] for batch in dataset.select_columns([column]).iter(10_000))


class TranslationDataModule(pl.LightningDataModule):
    """Owns the tokenizer and the encoded ``train``/``valid``/``test`` splits."""

    def __init__(self, cfg: DataConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.seed = seed  # shuffles training batches; the split has its own cfg.split_seed
        self.cache_dir = Path(cfg.cache_dir).expanduser().resolve()
        self.tokenizer: TranslationTokenizer | None = None
        self.splits: datasets.DatasetDict | None = None
        self.raw_splits: datasets.DatasetDict | None = None  # unfiltered text, for BLEU over every sentence
        self.stats: dict[str, int] = {}

    def _tokenizer_dir(self, train: datasets.Dataset) -> Path:
        key = config_key(self.cfg.vocab_size, self.cfg.shared_vocab) + train._fingerprint
        return self.cache_dir / f"tokenizer-{digest(key)}"

    def _train_or_load_tokenizer(self, train: datasets.Dataset) -> TranslationTokenizer:
        """Tokenizer of the train split only, so held-out text never shapes the vocabulary."""
        directory = self._tokenizer_dir(train)
        if directory.is_dir():
            return TranslationTokenizer.load(directory)
        log.info("training a %d-token BPE tokenizer on %d pairs", self.cfg.vocab_size, len(train))
        start = time.perf_counter()
        tokenizer = TranslationTokenizer.train(
            _texts(train, "src"), _texts(train, "tgt"), self.cfg.vocab_size, self.cfg.shared_vocab
        )
        build_into_place(directory, tokenizer.save)
        log.info("tokenizer trained in %.1fs, saved to %s", time.perf_counter() - start, directory)
        return tokenizer

    def prepare_data(self) -> None:
        """Build the corpus and tokenizer caches once (Lightning runs this on one process)."""
        raw, _ = corpus.load_splits(self.cfg)
        self._train_or_load_tokenizer(raw["train"])

    def _encode(self, name: str, dataset: datasets.Dataset, tokenizer_dir: Path) -> datasets.Dataset:
        return dataset.map(
            partial(_encode_batch, tokenizer=self.tokenizer),
            batched=True,
            batch_size=2000,
            features=_ENCODED,
            new_fingerprint=digest(f"{dataset._fingerprint}|{tokenizer_dir.name}"),
            desc=f"encoding {name}",
        )

    def _drop_too_long(self, dataset: datasets.Dataset) -> tuple[datasets.Dataset, int]:
        keep = np.flatnonzero(_lengths(dataset) <= self.cfg.max_length + 1)  # length counts one special
        if len(keep) == len(dataset):
            return dataset, 0
        fingerprint = digest(f"{dataset._fingerprint}|max_length={self.cfg.max_length}")
        return dataset.select(keep, new_fingerprint=fingerprint), len(dataset) - len(keep)

    def setup(self, stage: str | None = None) -> None:
        """Load every cached step (building what is missing); safe to call repeatedly."""
        if self.splits is not None:
            return
        raw, corpus_stats = corpus.load_splits(self.cfg)
        self.raw_splits = raw
        self.tokenizer = self._train_or_load_tokenizer(raw["train"])
        tokenizer_dir = self._tokenizer_dir(raw["train"])
        splits, too_long = {}, 0
        for name, dataset in raw.items():
            splits[name], dropped = self._drop_too_long(self._encode(name, dataset, tokenizer_dir))
            too_long += dropped
        self.splits = datasets.DatasetDict(splits)
        self.stats = {
            "malformed_lines": corpus_stats["malformed_lines"],
            "too_long_pairs": too_long,
            **{f"{name}_pairs": len(dataset) for name, dataset in splits.items()},
        }
        log.info("data ready: %s", self.stats)

    def _rank(self) -> tuple[int, int]:
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1:
            return trainer.global_rank, trainer.world_size
        return 0, 1

    def _loader(self, name: str, sampler: TokenBudgetBatchSampler) -> DataLoader:
        workers = self.cfg.num_workers
        on_gpu = self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"
        return DataLoader(
            self.splits[name].select_columns(["src_ids", "tgt_ids"]),
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=workers,
            persistent_workers=workers > 0,
            pin_memory=on_gpu,  # page-locked batches: Lightning's copies to the GPU are then asynchronous
        )

    def _sampler(self, name: str, max_tokens: int, shuffle: bool) -> TokenBudgetBatchSampler:
        rank, world_size = self._rank()
        lengths = _lengths(self.splits[name])
        return TokenBudgetBatchSampler(lengths, max_tokens, shuffle, self.seed, rank, world_size)

    def train_dataloader(self) -> DataLoader:
        """Shuffled token-budget batches, in the order :class:`~seq2seq.data.resume.BatchOrder` sets."""
        sampler = self._sampler("train", self.cfg.max_tokens, shuffle=True)
        BatchOrder.continue_interrupted_epoch(sampler, self.trainer)
        return self._loader("train", sampler)

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid", self._sampler("valid", self.cfg.eval_max_tokens, shuffle=False))

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self._sampler("test", self.cfg.eval_max_tokens, shuffle=False))

    def references(self, split: str) -> tuple[list[str], list[list[str]]]:
        """Unique source sentences of ``split`` and all their references, none length-filtered.

        The evaluation command reads the same unfiltered split, so validation BLEU and
        ``translate.py --eval`` score exactly the same sentences.
        """
        return corpus.references(self.raw_splits[split])
