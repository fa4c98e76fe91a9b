"""Where a run's wall time goes. On a GPU the share inside training steps is how busy the input
pipeline, validation and checkpoints let the GPU be; validation's share says what its cadence costs.

Host clocks, no device synchronisation: a step's kernels are waited for at the next sync point
(the logged loss), so over a logging window the step time is what the device spent, not what
the host spent launching kernels.
"""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl

from seq2seq.training.module import host_scalar


class TimeShares(pl.Callback):
    """Logs, with the training scalars, ``perf/train_step_share`` and ``perf/validation_share``:
    the time inside training steps and inside validations (BLEU decoding included) over the wall
    time since training started."""

    def __init__(self) -> None:
        self._started = 0.0
        self._in_steps = 0.0
        self._in_validation = 0.0
        self._mark = 0.0  # when the current step or validation began

    def _wall(self) -> float:
        return max(time.perf_counter() - self._started, 1e-9)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started = time.perf_counter()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self._mark = time.perf_counter()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self._in_steps += time.perf_counter() - self._mark
        wall = self._wall()
        pl_module.log("perf/train_step_share", host_scalar(self._in_steps / wall), on_step=True, batch_size=1)
        pl_module.log(
            "perf/validation_share", host_scalar(self._in_validation / wall), on_step=True, batch_size=1
        )

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._mark = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and self._started:
            self._in_validation += time.perf_counter() - self._mark
