"""Every completed run ends with a validation, whichever limit stops it.

Lightning validates on its schedule (every n epochs, every n steps, or every so many seconds) and
at a stop that a callback requests, but not when a run reaches ``max_steps`` or ``max_epochs``
between two scheduled validations: a short run could end with no ``best.ckpt`` and no score.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl


def is_last_step(trainer: pl.Trainer, batch_idx: int) -> bool:
    """Whether the step just taken reaches ``max_steps``, or ends the last batch of ``max_epochs``."""
    if 0 < trainer.max_steps <= trainer.global_step:
        return True
    max_epochs = trainer.fit_loop.max_epochs
    last_epoch = max_epochs is not None and max_epochs >= 0 and trainer.current_epoch + 1 >= max_epochs
    return last_epoch and batch_idx + 1 >= trainer.num_training_batches


class ValidateAtTheEnd(pl.Callback):
    """At the last step of a run that stops on a limit, asks Lightning to stop, which validates.

    Lightning validates at a requested stop (``trainer.should_stop``), as its Timer makes at
    ``max_time``, unless ``check_val_every_n_epoch`` skips the epoch; this callback lifts that
    skip too. It must run after the Timer, so it sees the Timer's request at the same step.
    Lightning validates once per step at most, so a scheduled validation at the same step is
    not repeated. Ctrl-C and faults raise instead of stopping, and get no validation.
    """

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if is_last_step(trainer, batch_idx):
            trainer.should_stop = True
        if trainer.should_stop:
            trainer.check_val_every_n_epoch = None  # every epoch may validate: this is the last
