"""When a run validates and when it stops, sized for corpora from a hundred pairs to millions.

``trainer.val_check_interval`` is a share of an epoch in the CPU recipe: on a corpus of a few
hundred pairs an epoch is a few steps, and validating every step or two costs more than training
and says nothing new. :class:`ValidationSpacing` keeps at least ``min_steps`` optimizer steps
between two validations. Early stopping counts only validations after the learning rate has
warmed up (and, under the ``wsd`` schedule, begun its decay), since BLEU stays near zero in the
first hundreds of steps and a run whose learning rate has not come down has not shown its best
(:class:`EarlyStoppingAfterWarmup`). :class:`StopReport` logs what can end the run at its start
and what ended it at its end, one line each.
"""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import EarlyStopping
from pytorch_lightning.callbacks.early_stopping import EarlyStoppingReason
from pytorch_lightning.utilities import rank_zero_only

from seq2seq.config import OptimConfig
from seq2seq.training.budget import budget_spent, clock_time, time_limit

log = logging.getLogger(__name__)

MONITOR = "val/bleu"  # what best.ckpt and early stopping follow


def batches_between_validations(trainer: pl.Trainer) -> float:
    """The training batches from one scheduled validation to the next, as Lightning has set them
    up from ``val_check_interval`` and ``check_val_every_n_epoch`` (inf for none or a time-based
    interval)."""
    every = trainer.val_check_batch
    if every is None or trainer.num_training_batches == float("inf"):
        return float("inf")  # time-based, or an epoch of unknown length
    if trainer.check_val_every_n_epoch is None or every < trainer.num_training_batches:
        return every
    return trainer.num_training_batches * trainer.check_val_every_n_epoch


class ValidationSpacing(pl.Callback):
    """At least ``min_steps`` optimizer steps between two validations (0: as Lightning schedules
    them). A closer schedule becomes one validation every ``min_steps`` steps, counted across
    epochs; the change is logged once. Set at each epoch's start, after Lightning has derived its
    schedule from the epoch's length (it does again where dataloaders are reloaded)."""

    def __init__(self, min_steps: int) -> None:
        self.min_steps = min_steps
        self._said = False

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        floor = self.min_steps * trainer.accumulate_grad_batches
        scheduled = batches_between_validations(trainer)
        if scheduled >= floor:
            return
        trainer.val_check_batch = floor
        trainer.check_val_every_n_epoch = None  # count batches across epochs, not within one
        if not self._said:
            self._said = True
            rank_zero_only(log.info)(
                "validation: every %d steps (callbacks.min_steps_between_validations), not every %d "
                "as trainer.val_check_interval=%s gives on epochs of %d steps",
                self.min_steps,
                max(1, int(scheduled) // trainer.accumulate_grad_batches),
                trainer.val_check_interval,
                max(1, trainer.num_training_batches // trainer.accumulate_grad_batches),
            )


def counting_from(optim: OptimConfig) -> tuple[int, float]:
    """The step and the share of the budget from which early stopping counts a validation: the
    warm-up's end, and under ``wsd`` the start of the decay (0 for the other schedules)."""
    return optim.warmup_steps, 1.0 - optim.decay_share if optim.schedule == "wsd" else 0.0


class EarlyStoppingAfterWarmup(EarlyStopping):
    """Lightning's early stopping on ``val/bleu``, blind to the validations before ``from_step``
    steps and before ``from_share`` of the budget is spent: they neither count against the
    patience nor set the score to beat."""

    def __init__(self, patience: int, from_step: int, from_share: float) -> None:
        # Checked after each validation, which is when val/bleu changes. Left to itself, Lightning
        # (2.6) decides this from trainer.val_check_interval, an attribute a time-based interval
        # (the GPU recipe's) leaves unset, and the run dies in its setup.
        super().__init__(monitor=MONITOR, mode="max", patience=patience, check_on_train_epoch_end=False)
        self.from_step = from_step
        self.from_share = from_share

    def counts(self, trainer: pl.Trainer) -> bool:
        """Whether the validation just made counts."""
        return trainer.global_step >= self.from_step and budget_spent(trainer)() >= self.from_share

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.counts(trainer):
            super().on_validation_end(trainer, pl_module)

    def describe(self) -> str:
        """The rule in words, for the ``limits:`` line."""
        start = f"from step {self.from_step}"
        if self.from_share > 0:
            start += f" and {self.from_share:.0%} of the budget"
        return f"early stopping after {self.patience} validations without a gain in {MONITOR} ({start})"


def limits(trainer: pl.Trainer) -> str:
    """What can end the run, in words: the clock, the step and epoch caps, early stopping."""
    timer = time_limit(trainer)
    parts = [f"max_time {clock_time(timer.time_elapsed() + timer.time_remaining())}"] if timer else []
    if trainer.max_steps >= 0:
        parts.append(f"max_steps {trainer.max_steps}")
    if trainer.max_epochs is not None and trainer.max_epochs >= 0:
        parts.append(f"max_epochs {trainer.max_epochs}")
    stopper = trainer.early_stopping_callback
    if isinstance(stopper, EarlyStoppingAfterWarmup):
        parts.append(stopper.describe())
    return ", ".join(parts) + ", whichever comes first" if len(parts) > 1 else (parts or ["none"])[0]


def stop_reason(trainer: pl.Trainer) -> str:
    """What ended a run that ran to its end, in words naming the key that set the limit; a limit
    first, as early stopping at the same step changed nothing."""
    timer = time_limit(trainer)
    if timer is not None and timer.time_remaining() <= 0:
        return f"trainer.max_time {clock_time(round(timer.time_elapsed() + timer.time_remaining()))} reached"
    if 0 < trainer.max_steps <= trainer.global_step:
        return f"trainer.max_steps={trainer.max_steps} reached"
    max_epochs = trainer.max_epochs
    if max_epochs is not None and 0 <= max_epochs <= trainer.current_epoch:
        return f"trainer.max_epochs={max_epochs} reached"
    stopper = trainer.early_stopping_callback
    if stopper is not None and stopper.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED:
        return (
            f"early stopping: {MONITOR} did not rise above {float(stopper.best_score):.2f} in "
            f"{stopper.wait_count} validations (callbacks.early_stopping_patience={stopper.patience})"
        )
    return "a callback asked the trainer to stop"


class StopReport(pl.Callback):
    """One line at the start, ``limits: ...``, and one at the end, ``stopped at step N (epoch E):
    <why>``; rank 0 only. Ctrl-C and SIGTERM say so themselves (:class:`SaveLast`)."""

    @rank_zero_only
    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        log.info("limits: %s", limits(trainer))

    @rank_zero_only
    def on_train_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if not trainer.interrupted:
            step, epoch = trainer.global_step, trainer.current_epoch
            log.info("stopped at step %d (epoch %d): %s", step, epoch, stop_reason(trainer))
