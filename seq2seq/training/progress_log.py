"""Training progress as plain log lines, for logs that no terminal shows.

The progress bar redraws one line on a terminal; written to a file (``nohup``, SLURM's
``--output``, a CI log) it would be frames, so it is drawn on a terminal only (:func:`progress_bar`).
Every so many steps or seconds a line says where training is, and every validation says its
scores. The lines always reach the run's ``train.log``, and the console where no bar is drawn.
Hydra's job logging (configs/hydra/job_logging/rich.yaml) takes its console handler from
:func:`console_handler` and its filter from :class:`ConsoleFilter`.

Once, at the start, a line states the global batch (:class:`GlobalBatch`): the learning rate and
warmup are tuned for a number of tokens per optimizer step, which grows with every process and
every accumulated batch, so a run moved from one GPU to eight takes steps eight times bigger.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import RichProgressBar
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only
from rich.logging import RichHandler

from seq2seq.data.batching import Batch
from seq2seq.training.budget import clock_time, time_limit

log = logging.getLogger(__name__)

TO_CONSOLE = "to_console"  # a log record's attribute: False keeps the line off the console


def console_handler(plain_format: str) -> logging.Handler:
    """Rich's handler on a terminal, where log lines print above the progress bar; elsewhere lines
    in ``plain_format`` on stdout, one a record, as a log file wants them (Rich wraps at 80 columns)."""
    if sys.stdout.isatty():
        return RichHandler(show_path=False)  # it adds the time and level itself
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(plain_format))
    return handler


class EpochBar(RichProgressBar):
    """Rich's progress bar, whose epoch count says ``Epoch 4`` where no epoch limit is set
    (Lightning's would say ``Epoch 4/-2`` for ``max_epochs=-1``)."""

    def _get_train_description(self, current_epoch: int) -> str:
        max_epochs = self.trainer.max_epochs
        described = f"Epoch {current_epoch}" + (f"/{max_epochs - 1}" if max_epochs and max_epochs > 0 else "")
        return f"{described:{len(self.validation_description)}}"  # as wide as "Validation": no flicker


def progress_bar(enabled: bool) -> RichProgressBar | None:
    """The progress bar where ``callbacks.progress_bar`` asks for one and stdout is a terminal;
    written to a file a bar is only its frames, and the plain lines (:class:`ProgressLog`) say it all."""
    return EpochBar() if enabled and sys.stdout.isatty() else None


class ConsoleFilter(logging.Filter):
    """Lets through every record except those marked ``to_console=False``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, TO_CONSOLE, True)


def seconds_left(trainer: pl.Trainer, step_seconds: float) -> float | None:
    """Seconds until the first limit: the rest of ``max_time``, or the steps left at the recent
    step time; None when neither limit is known."""
    left = math.inf
    if (timer := time_limit(trainer)) is not None:
        left = timer.time_remaining()
    steps = trainer.estimated_stepping_batches
    if math.isfinite(steps) and step_seconds > 0:
        left = min(left, (steps - trainer.global_step) * step_seconds)
    return None if math.isinf(left) else max(left, 0.0)


class ProgressLog(pl.Callback):
    """A line every ``every_n_steps`` steps or ``every_s`` seconds, whichever comes first (0 turns
    either off), and one per validation; rank 0 only."""

    def __init__(self, every_n_steps: int, every_s: float) -> None:
        self.every_n_steps = every_n_steps
        self.every_s = every_s
        self._to_console = True
        self._started = self._last_time = 0.0
        self._last_step = 0
        self._tokens = 0
        self._best: float | None = None  # val/bleu of best.ckpt

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self._to_console = trainer.progress_bar_callback is None  # a bar is drawn on a terminal only
        self._started = self._last_time = time.monotonic()
        self._last_step = trainer.global_step
        self._tokens = 0
        score = getattr(trainer.checkpoint_callback, "best_model_score", None)  # restored on resume
        self._best = None if score is None else float(score)

    def _write(self, message: str, *args: Any) -> None:
        log.info(message, *args, extra={TO_CONSOLE: self._to_console})

    @rank_zero_only
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Batch, batch_idx: int
    ) -> None:
        self._tokens += batch.real_tokens()
        now, step = time.monotonic(), trainer.global_step
        steps, seconds = step - self._last_step, now - self._last_time
        by_steps = self.every_n_steps and steps >= self.every_n_steps
        by_time = self.every_s and seconds >= self.every_s
        if steps <= 0 or not (by_steps or by_time):
            return
        metrics = trainer.callback_metrics
        left = seconds_left(trainer, seconds / steps)
        self._write(
            "step %d | epoch %d | loss %.3f | lr %.2e | %.0f tokens/s | elapsed %s | left %s",
            step,
            trainer.current_epoch,
            float(metrics.get("train/loss", math.nan)),
            float(metrics.get("train/lr", math.nan)),
            self._tokens / max(seconds, 1e-9),
            clock_time(now - self._started),
            "unknown" if left is None else clock_time(left),
        )
        self._last_time, self._last_step, self._tokens = now, step, 0

    @rank_zero_only
    def on_validation_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        metrics = trainer.callback_metrics
        if trainer.sanity_checking or "val/bleu" not in metrics:
            return
        bleu, best = float(metrics["val/bleu"]), self._best
        improved = best is None or bleu > best  # as best.ckpt is replaced: a tie keeps the earlier one
        self._best = bleu if improved else best
        self._write(
            "validation at step %d: BLEU %.2f, chrF %.2f, %s",
            trainer.global_step,
            bleu,
            float(metrics.get("val/chrf", math.nan)),
            "the best so far" if improved else f"best {best:.2f}",
        )


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
