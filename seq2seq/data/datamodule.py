"""LightningDataModule: corpus -> grouped splits -> tokenizer -> ids -> token-budget loaders.

Every expensive step is cached under ``cfg.cache_dir`` with a name derived from its inputs
(the corpus bytes, the split settings, the tokenizer settings), so a second run re-trains and
re-encodes nothing, a copied corpus reuses its caches, and a changed input never reuses a stale
one. Every process of a distributed run calls :meth:`setup`; one process per cache directory
builds each cache and the others wait for it (:func:`seq2seq.data.cache.build_once`), so all
ranks load the same files, the tokenizer included.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Callable, Iterator
from functools import partial
from itertools import chain
from pathlib import Path

import datasets
import numpy as np
import pytorch_lightning as pl
from torch.utils.data import DataLoader

from seq2seq.config import DataConfig, DataError
from seq2seq.data import batching, corpus, encoded
from seq2seq.data.batching import Batch, collate
from seq2seq.data.cache import build_once, digest
from seq2seq.data.sampler import BatchOrder, TokenBudgetBatchSampler
from seq2seq.data.static_shapes import StaticShapes, static_collate
from seq2seq.data.streamed import build
from seq2seq.data.streamed.batches import StreamedBatchSampler, StreamedPairs
from seq2seq.data.tokenizers.given import read_given
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer, config_key

log = logging.getLogger("seq2seq.data")

_ENCODING_VERSION = 1  # bump when the encoded layout changes
LONG_SHARE_WARNING = 0.01  # warn when more of the training pairs than this exceed max_length


def _texts(dataset: datasets.Dataset, column: str) -> Iterator[str]:
    """Stream one text column in Arrow batches instead of materialising it."""
    return chain.from_iterable(batch[column] for batch in dataset.select_columns([column]).iter(10_000))


def _train_tokenizer(train: datasets.Dataset, cfg: DataConfig, directory: Path) -> None:
    """Tokenizer of the train split only, so held-out text never shapes the vocabulary.

    On a corpus of millions of pairs, an evenly spread sample of a million (the file may be sorted,
    by length for one) learns nearly the same merges at a fraction of the time and memory.
    """
    train = corpus.evenly_spread(train, cfg.tokenizer_max_pairs)
    log.info("training a %d-token BPE tokenizer on %d pairs", cfg.vocab_size, len(train))
    tokenizer = TranslationTokenizer.train(
        _texts(train, "src"), _texts(train, "tgt"), cfg.vocab_size, cfg.shared_vocab
    )
    tokenizer.save(directory)


def truncating_collate(examples: list[dict], max_length: int) -> Batch:
    """:func:`collate` after cutting both sides of each pair to ``max_length`` tokens."""
    cut = [{"src_ids": ex["src_ids"][:max_length], "tgt_ids": ex["tgt_ids"][:max_length]} for ex in examples]
    return collate(cut)


def leave_sigterm_to_the_trainer(_worker: int) -> None:
    """A loader worker ignores SIGTERM. Sent to the whole process group (``timeout``, a scheduler
    stopping a job), it would kill the worker first, and the training process would fail on its
    loader instead of saving ``last.ckpt``; the worker exits when that process shuts the loader down."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class TranslationDataModule(pl.LightningDataModule):
    """Owns the tokenizer and the encoded ``train``/``valid``/``test`` splits.

    ``splits`` hold ids (``src_ids``, ``tgt_ids``, ``length``) of the pairs training uses;
    ``raw_splits`` hold the text of every pair, for BLEU over every held-out sentence.
    """

    def __init__(self, cfg: DataConfig, seed: int = 0, tokenizer: TranslationTokenizer | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.seed = seed  # shuffles training batches; the split has its own cfg.split_seed
        self.cache_dir = corpus.cache_root(cfg)
        # a checkpoint's (for init_from), data.tokenizer_file's (read now: a bad file fails before the
        # corpus is read), or None: learnt in setup
        self.tokenizer = tokenizer if tokenizer is not None else read_given(cfg)
        self.splits: datasets.DatasetDict | None = None
        self.raw_splits: datasets.DatasetDict | None = None
        self.lengths: dict[str, np.ndarray] = {}  # padded length of each pair of ``splits``, as collated
        self.stats: dict[str, int | float] = {}
        self.streamed: StreamedPairs | None = None  # the training pairs, with data.streaming

    def _cache(self, kind: str, key: str, build: Callable[[Path], None], what: str) -> Path:
        directory = self.cache_dir / f"{kind}-{digest(key)}"
        build_once(directory, build, what, self.cfg.lock_timeout_s)
        return directory

    def prepare_data(self) -> None:
        """Build whatever cache is missing; the same as :meth:`setup`, which any process may call."""
        self.setup()

    def setup(self, stage: str | None = None) -> None:
        """Load every cached step (building what is missing); safe to call repeatedly."""
        if self.splits is not None:
            return
        if self.cfg.streaming:
            self._setup_streamed()
            return
        raw, corpus_stats = corpus.load_splits(self.cfg)
        self.raw_splits = raw
        train = raw["train"]
        if self.tokenizer is None:
            tokenizer_dir = self._cache(
                "tokenizer",
                f"{config_key(self.cfg.vocab_size, self.cfg.shared_vocab)}|"
                f"{min(len(train), self.cfg.tokenizer_max_pairs)}|{train._fingerprint}",
                partial(_train_tokenizer, train, self.cfg),
                "tokenizer",
            )
            self.tokenizer = TranslationTokenizer.load(tokenizer_dir)
            tokenizer_key = tokenizer_dir.name
        else:
            tokenizer_key = f"given-{digest(json.dumps(self.tokenizer.to_dict(), sort_keys=True))}"
        texts = "|".join(split._fingerprint for split in raw.values())  # a given dev file's among them
        encoded_dir = self._cache(
            "encoded",
            f"{_ENCODING_VERSION}|{tokenizer_key}|{texts}",
            partial(encoded.encode_splits, raw, self.tokenizer),
            "token ids of every split",
        )
        splits, too_long = {}, {}
        for name in raw:
            loaded = encoded.load_split(encoded_dir, name)
            splits[name], self.lengths[name], too_long[name] = self._apply_max_length(loaded)
        self.splits = datasets.DatasetDict(splits)
        self.stats = {
            "malformed_lines": corpus_stats["malformed_lines"],
            "too_long_pairs": sum(too_long.values()),
            "too_long_train_pairs": too_long["train"],
            "too_long_train_share": too_long["train"] / max(1, len(raw["train"])),
            **{f"{name}_pairs": len(dataset) for name, dataset in splits.items()},
        }
        self._report_too_long()
        log.info("data ready: %s", self.stats)

    def _setup_streamed(self) -> None:
        """The held-out splits as without streaming; the training pairs stay in the sharded store."""
        data = build.build(self.cfg, tokenizer=self.tokenizer)
        self.tokenizer = self.tokenizer or TranslationTokenizer.load(data.tokenizer_dir)
        self.raw_splits = data.held_out()
        splits, too_long = {}, {}
        for name in build.HELD_OUT:
            loaded = encoded.load_split(data.held_out_ids, name)
            splits[name], self.lengths[name], too_long[name] = self._apply_max_length(loaded)
        self.splits = datasets.DatasetDict(splits)
        self.streamed = StreamedPairs(data.store)
        rows, over = data.store.rows, data.store.too_long(self.cfg.max_length)
        self.stats = {
            "malformed_lines": data.corpus_stats["malformed_lines"],
            "too_long_pairs": over + sum(too_long.values()),
            "too_long_train_pairs": over,
            "too_long_train_share": over / max(1, rows),
            "train_pairs": rows - over if self.cfg.too_long == "drop" else rows,
            **{f"{name}_pairs": len(dataset) for name, dataset in splits.items()},
        }
        self._report_too_long()
        log.info("data ready (streamed from %s): %s", data.store.root, self.stats)

    def _apply_max_length(self, dataset: datasets.Dataset) -> tuple[datasets.Dataset, np.ndarray, int]:
        """The split as training uses it, its pairs' padded lengths as collated, and how many of
        its pairs exceed ``max_length``.

        The lengths are read here, from the whole memory-mapped column: reading them from the
        selected dataset would gather every column of every kept row into memory first.
        """
        lengths = encoded.lengths(dataset)
        over = batching.too_long(lengths, self.cfg.max_length)
        count = int(over.sum())
        if self.cfg.too_long == "truncate":
            return dataset, np.minimum(lengths, self.cfg.max_length + 1), count
        if count == 0:
            return dataset, lengths, count
        keep = np.flatnonzero(~over)
        fingerprint = digest(f"{dataset._fingerprint}|max_length={self.cfg.max_length}")
        return dataset.select(keep, new_fingerprint=fingerprint), lengths[keep], count

    def _report_too_long(self) -> None:
        """A log line on the pairs over ``max_length``; a :class:`DataError` where no pair is left
        to train on, which would end the run at once with no checkpoint."""
        count, share = self.stats["too_long_train_pairs"], self.stats["too_long_train_share"]
        if self.stats["train_pairs"] == 0 and count:
            raise DataError(
                f"data.max_length={self.cfg.max_length} drops all {count} training pairs, each longer: "
                "raise it, or set data.too_long=truncate"
            )
        action = "dropped" if self.cfg.too_long == "drop" else "truncated"
        line = "%d training pairs (%.2f%%) exceed data.max_length=%d tokens and are %s (data.too_long)"
        args = (count, 100 * share, self.cfg.max_length, action)
        if share > LONG_SHARE_WARNING:
            log.warning(line + ": check max_length against this corpus", *args)
        else:
            log.info(line, *args)

    def _rank(self) -> tuple[int, int]:
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1:
            return trainer.global_rank, trainer.world_size
        return 0, 1

    def _loader(
        self,
        name: str,
        sampler: TokenBudgetBatchSampler | StreamedBatchSampler,
        shapes: StaticShapes | None = None,
    ) -> DataLoader:
        # Evaluation loads in this process: a worker started at the first validation would be a
        # fork of the grown training process.
        workers = self.cfg.num_workers if name == "train" else 0
        on_gpu = self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"
        truncate = self.cfg.too_long == "truncate"
        streamed = name == "train" and self.streamed is not None
        collate_fn = partial(truncating_collate, max_length=self.cfg.max_length) if truncate else collate
        if shapes is not None:
            collate_fn = partial(static_collate, collate=collate_fn, shapes=shapes)
        return DataLoader(
            self.streamed if streamed else self.splits[name].select_columns(["src_ids", "tgt_ids"]),
            batch_sampler=sampler,
            collate_fn=collate_fn,
            num_workers=workers,
            persistent_workers=workers > 0,
            worker_init_fn=leave_sigterm_to_the_trainer if workers else None,
            pin_memory=on_gpu,  # page-locked batches: Lightning's copies to the GPU are then asynchronous
        )

    def _sampler(
        self, name: str, max_tokens: int, shuffle: bool, shapes: StaticShapes | None = None
    ) -> TokenBudgetBatchSampler:
        rank, world_size = self._rank()
        lengths = self.lengths[name] if shapes is None else shapes.rounded(self.lengths[name])
        return TokenBudgetBatchSampler(lengths, max_tokens, shuffle, self.seed, rank, world_size)

    def _static_shapes(self) -> StaticShapes | None:
        """The training batches' shapes with ``data.static_shapes``; None: each batch has its own."""
        cfg = self.cfg
        return StaticShapes.of_config(cfg) if cfg.static_shapes else None

    def _streamed_sampler(self, shapes: StaticShapes | None) -> StreamedBatchSampler:
        """The training sampler over the store, at the epoch being started: a streamed epoch's length
        is its own, so Lightning builds the loader anew each epoch and reads its length then."""
        rank, world_size = self._rank()
        truncate = self.cfg.too_long == "truncate"
        store, cfg = self.streamed.store, self.cfg
        sampler = StreamedBatchSampler(
            store, cfg.max_tokens, self.seed, cfg.max_length, truncate, rank, world_size, shapes=shapes
        )
        sampler.set_epoch(self.trainer.current_epoch if self.trainer is not None else 0)
        return sampler

    def train_dataloader(self) -> DataLoader:
        """Shuffled token-budget batches, in the order :class:`~seq2seq.data.sampler.BatchOrder` sets."""
        shapes = self._static_shapes()
        sampler = (
            self._streamed_sampler(shapes)
            if self.cfg.streaming
            else self._sampler("train", self.cfg.max_tokens, True, shapes)
        )
        BatchOrder.continue_interrupted_epoch(sampler, self.trainer)
        return self._loader("train", sampler, shapes)

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
