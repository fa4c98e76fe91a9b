"""LightningDataModule: the prepared data (:mod:`seq2seq.data.prepare`) as token-budget loaders."""

from __future__ import annotations

import gc
import signal
from functools import partial

import datasets
import numpy as np
import pytorch_lightning as pl
from torch.utils.data import DataLoader

from seq2seq.config import DataConfig
from seq2seq.data import corpus
from seq2seq.data.batching import Batch, collate
from seq2seq.data.prepare import PreparedData, prepare
from seq2seq.data.sampler import BatchOrder, TokenBudgetBatchSampler
from seq2seq.data.static_shapes import StaticShapes, static_collate
from seq2seq.data.streamed.batches import StreamedBatchSampler, StreamedPairs
from seq2seq.data.tokenizers.given import read_given
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer


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
    """Lightning's view of :class:`~seq2seq.data.prepare.PreparedData`: :meth:`setup` prepares it,
    the loaders batch it; its fields read through once it is set up."""

    def __init__(self, cfg: DataConfig, seed: int = 0, tokenizer: TranslationTokenizer | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.seed = seed  # shuffles training batches; the split has its own cfg.split_seed
        # a checkpoint's (for init_from), data.tokenizer_file's (read now: a bad file fails before the
        # corpus is read), or None: learnt in setup
        self.given_tokenizer = tokenizer if tokenizer is not None else read_given(cfg)
        self.prepared: PreparedData | None = None

    def prepare_data(self) -> None:
        """Build whatever cache is missing; the same as :meth:`setup`, which any process may call."""
        self.setup()

    def setup(self, stage: str | None = None) -> None:
        """Load every cached step (building what is missing); safe to call repeatedly."""
        if self.prepared is None:
            self.prepared = prepare(self.cfg, self.given_tokenizer)

    def _ready(self) -> PreparedData:
        if self.prepared is None:
            raise RuntimeError("TranslationDataModule: call setup() first")
        return self.prepared

    @property
    def tokenizer(self) -> TranslationTokenizer:
        return self._ready().tokenizer

    @property
    def splits(self) -> datasets.DatasetDict:
        return self._ready().splits

    @property
    def raw_splits(self) -> datasets.DatasetDict:
        return self._ready().raw_splits

    @property
    def lengths(self) -> dict[str, np.ndarray]:
        return self._ready().lengths

    @property
    def stats(self) -> dict[str, int | float]:
        return self._ready().stats

    @property
    def streamed(self) -> StreamedPairs | None:
        return self._ready().streamed

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
        if workers:
            # A worker forks from this process and shares its pages until either side writes one;
            # the cycle collector writes into each object it visits, and frozen objects it skips
            # (the run's PSS 0.1 GiB lower on a 2-core Xeon: record loader-worker-freeze-xeon).
            gc.collect()
            gc.freeze()
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
