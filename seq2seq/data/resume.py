"""Which training batch comes next: each epoch's shuffle and, after a resume, the first batch the
checkpointed run had not trained on, so that a resumed run ends with the same weights and step
count as one that was never interrupted (tests/test_faults.py).

All of it is :class:`BatchOrder`; the batch sampler only offers ``set_epoch`` and ``skip_batches``.
Lightning does neither for a custom batch sampler: it calls ``set_epoch`` only on a loader's
``sampler`` and ``batch_sampler.sampler``, and after a mid-epoch resume it would start the epoch
again at its first batch (warning that the resume is not exact).
"""

from __future__ import annotations

import warnings
from contextlib import ExitStack
from typing import Any

import pytorch_lightning as pl

from seq2seq.data.batching import TokenBudgetBatchSampler

RESUME_WARNING = "You're resuming from a checkpoint that ended before the epoch ended"


class BatchOrder(pl.Callback):
    """Sets each epoch on the training batch sampler and continues an interrupted epoch exactly."""

    def __init__(self) -> None:
        self._quiet = ExitStack()  # the warning filter, from the start of a resumed run to its first batch

    @staticmethod
    def continue_interrupted_epoch(sampler: TokenBudgetBatchSampler, trainer: pl.Trainer | None) -> None:
        """After a resume, start ``sampler`` at the first batch the checkpointed run had not trained on.

        The datamodule calls this when it builds the training loader: Lightning creates the loader's
        iterator (and starts its workers, which read their first batches) right after, before any
        callback runs. A checkpoint taken on an epoch's last batch starts the next epoch.
        """
        if trainer is None or not trainer.fit_loop.restarting:
            return
        epoch, done = trainer.current_epoch, trainer.fit_loop.epoch_loop.batch_progress.current.processed
        if done >= len(sampler):
            epoch, done = epoch + 1, 0
        sampler.set_epoch(epoch)
        sampler.skip_batches(done)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Lightning warns that a mid-epoch resume is not exact when the epoch restarts; it is exact."""
        if trainer.fit_loop.restarting:
            self._quiet.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", message=RESUME_WARNING)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Before the epoch's iterator is created (not called for an epoch continued after a resume)."""
        sampler = getattr(trainer.train_dataloader, "batch_sampler", None)
        if isinstance(sampler, TokenBudgetBatchSampler):
            sampler.set_epoch(trainer.current_epoch)

    def on_train_batch_start(self, *args: Any) -> None:
        self._quiet.close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, error: BaseException) -> None:
        self._quiet.close()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._quiet.close()
