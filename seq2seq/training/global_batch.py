"""The global batch, stated once at the start of fit.

The learning rate and warmup are tuned for a number of tokens per optimizer step, and that number
grows with every process and every accumulated batch: a run moved from one GPU to eight takes
eight times bigger steps. The line makes that visible in the log and in TensorBoard.
"""

from __future__ import annotations

import logging

import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only

log = logging.getLogger(__name__)


def describe_global_batch(max_tokens: int, processes: int, accumulate: int) -> str:
    """One line: the tokens per optimizer step and the three factors it is the product of."""
    return (
        f"global batch: up to {max_tokens * processes * accumulate} padded tokens per optimizer step = "
        f"data.max_tokens {max_tokens} x {processes} processes (trainer.world_size) "
        f"x {accumulate} (trainer.accumulate_grad_batches)"
    )


class GlobalBatch(pl.Callback):
    """Logs :func:`describe_global_batch` from rank 0, and writes it to TensorBoard when it logs."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens

    @rank_zero_only
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        line = describe_global_batch(self.max_tokens, trainer.world_size, trainer.accumulate_grad_batches)
        log.info("%s", line)
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_text("global_batch", line, trainer.global_step)
