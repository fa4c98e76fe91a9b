"""Lightning callbacks and plugins that make runs resumable and safe to interrupt."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from lightning_fabric.plugins import TorchCheckpointIO

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint to a temporary file, then rename: a kill never leaves half a file."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        super().save_checkpoint(checkpoint, partial, storage_options)
        os.replace(partial, path)


class SaveLast(pl.Callback):
    """Keep ``last.ckpt`` current: every n steps, after each validation, at the end, and on Ctrl-C.

    Lightning's ModelCheckpoint refreshes ``last`` only when it also saves a monitored checkpoint,
    and its step and epoch triggers exclude each other; resuming needs all of them.
    """

    def __init__(self, dirpath: str | Path, every_n_steps: int = 0) -> None:
        self.path = Path(dirpath) / "last.ckpt"
        self.every_n_steps = every_n_steps
        self._saved_step = -1

    def _save(self, trainer: pl.Trainer) -> None:
        if trainer.global_step != self._saved_step and not trainer.sanity_checking:
            trainer.save_checkpoint(self.path)
            self._saved_step = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0:
            self._save(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save(trainer)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, error: BaseException) -> None:
        if isinstance(error, KeyboardInterrupt):
            self._save(trainer)
            log.warning("interrupted: saved a resumable checkpoint to %s", self.path)


class ShuffleEachEpoch(pl.Callback):
    """Tell the batch sampler the epoch number before each epoch's iterator is created.

    Lightning only calls ``set_epoch`` on ``loader.sampler`` and ``loader.batch_sampler.sampler``,
    never on a custom ``batch_sampler`` itself, so without this every epoch repeats one order.
    """

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        sampler = getattr(trainer.train_dataloader, "batch_sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(trainer.current_epoch)
