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


class SaveOnInterrupt(pl.Callback):
    """On Ctrl-C, save ``last.ckpt`` so ``ckpt_path=<dir>/last.ckpt`` resumes where training stopped."""

    def __init__(self, dirpath: str | Path) -> None:
        self.path = Path(dirpath) / "last.ckpt"

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, KeyboardInterrupt):
            trainer.save_checkpoint(self.path)
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
