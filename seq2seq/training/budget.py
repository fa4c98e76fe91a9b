"""The run's budget and what follows from it: how far the LR schedule has got, and whether dropout pays.

A run ends at ``trainer.max_steps``, ``max_epochs`` or ``max_time``, whichever comes first, so the
same 30-minute config sees a couple of epochs of the corpus on a slow CPU and dozens on a GPU. A
run that sees few epochs is limited by underfitting, not overfitting: it trains best without
dropout and with a learning rate that decays to zero by its end rather than by a fixed step
count (docs/training.md, Budget, holds the runs that show it). So both are set from the budget the run
actually gets, measured while it runs.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Timer

from seq2seq.model import Transformer
from seq2seq.model.attention import MultiHeadAttention
from seq2seq.model.dropout import Dropout

log = logging.getLogger(__name__)

MEASURE_SECONDS = 60.0  # training time over which the step rate is measured (less in short runs)
MEASURE_SHARE = 0.05  # ...or this share of max_time, whichever is shorter
MEASURE_STEPS = 10  # ...and at least this many steps, so that a GPU's slow first steps average out


def inverse_sqrt_factor(step: int, warmup_steps: int) -> float:
    """The paper's schedule as a multiplier of the peak LR: linear warmup, then 1/√step decay."""
    step = step + 1
    return min(step / warmup_steps, math.sqrt(warmup_steps / step))


def wsd_factor(
    step: int, warmup_steps: int, progress: float, decay_share: float, decay_shape: str = "linear"
) -> float:
    """Warmup-stable-decay: linear warmup over ``warmup_steps``, the peak LR, then a decay to zero
    over the last ``decay_share`` of the budget (``progress`` runs from 0 to 1): linear, or
    "1-sqrt", which keeps the LR higher for longer and drops it fastest at the end."""
    warmup = min(1.0, (step + 1) / warmup_steps)
    left = min(1.0, max(0.0, (1.0 - progress) / decay_share)) if decay_share > 0 else 1.0  # 1 -> 0
    decay = left if decay_shape == "linear" else 1.0 - math.sqrt(1.0 - left)
    return warmup * decay


def time_limit(trainer: pl.Trainer) -> Timer | None:
    """Lightning's Timer for ``max_time``, which keeps the time spent across resumes; None without a limit."""
    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
    return timer if timer is not None and timer.time_remaining() is not None else None


def time_share(trainer: pl.Trainer) -> float:
    """The share of ``max_time`` spent (0 without a time limit)."""
    timer = time_limit(trainer)
    if timer is None:
        return 0.0
    elapsed = timer.time_elapsed()
    return elapsed / max(elapsed + timer.time_remaining(), 1e-9)


def step_share(step: int, budget: float) -> float:
    """The share of a step budget (``max_steps``, or ``max_epochs`` worth of steps; may be
    infinite) done once the step in progress, numbered ``step`` from 0, is."""
    return (step + 1) / budget if math.isfinite(budget) and budget > 0 else 0.0


def estimated_steps(step: int, measured: int, spent: float, elapsed: float, remaining: float) -> float | None:
    """The steps a time-limited run will have made at its end, said at ``step`` from ``measured``
    steps that took ``spent`` seconds, with ``elapsed`` and ``remaining`` seconds of ``max_time``.
    None while the measurement is too short to trust: a GPU's first steps are much slower than the
    rest, so a measure of the first few alone underestimates the run many times over
    (docs/results.md, the run ``h200-base-2min``)."""
    window = min(MEASURE_SECONDS, MEASURE_SHARE * (elapsed + remaining))
    if spent < window or measured < MEASURE_STEPS:
        return None
    return step + measured / spent * remaining


def set_dropout(model: Transformer, enabled: bool) -> None:
    """Dropout as configured, or none at all."""
    for module in model.modules():
        if isinstance(module, Dropout):
            module.p = model.cfg.dropout if enabled else 0.0
        elif isinstance(module, MultiHeadAttention):
            module.dropout = model.cfg.attention_dropout if enabled else 0.0


class Budget(pl.Callback):
    """Before each step, puts the share of the budget spent once it is done into
    ``pl_module.progress``; the LR scheduler, stepped right after it, reads it for the next step.
    Once the step rate is known, estimates the epochs the run will see and keeps dropout off below
    ``dropout_min_epochs``; the decision is logged and kept across resumes. Under DDP,
    rank 0's progress and step-rate measurement are broadcast, so every rank schedules alike.
    """

    def __init__(self, dropout_min_epochs: float) -> None:
        self.dropout_min_epochs = dropout_min_epochs
        self.epochs: float | None = None  # the estimate, once made
        self._step_budget = math.inf  # max_steps, or max_epochs worth of steps, known at the start
        self._measure_from: tuple[float, int] | None = None  # (clock, step) where measuring began

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self._step_budget = trainer.estimated_stepping_batches
        if self.dropout_min_epochs <= 0:
            return
        if self.epochs is None and time_limit(trainer) is None:  # the steps alone decide
            self._decide(trainer, pl_module, self._step_budget)
        set_dropout(pl_module.model, self.epochs is not None and self.epochs >= self.dropout_min_epochs)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        progress = max(step_share(trainer.global_step, self._step_budget), time_share(trainer))
        pl_module.progress = min(1.0, trainer.strategy.broadcast(progress))  # one LR on every rank

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.dropout_min_epochs <= 0 or self.epochs is not None:
            return
        now, step = time.monotonic(), trainer.global_step
        if self._measure_from is None:  # the first step pays for warm-up: measure from the next
            self._measure_from = (now, step)
            return
        started, first_step = self._measure_from
        timer = time_limit(trainer)  # not None: step budgets decide at the start
        estimate = estimated_steps(
            step, step - first_step, now - started, timer.time_elapsed(), timer.time_remaining()
        )
        steps = None if estimate is None else min(self._step_budget, estimate)
        # Every rank broadcasts at every step until the decision: rank 0's clock alone says when and
        # how many steps, so the ranks decide at the same step and never wait on a skipped broadcast.
        steps = trainer.strategy.broadcast(steps)
        if steps is None:
            return
        self._decide(trainer, pl_module, steps)
        set_dropout(pl_module.model, self.epochs >= self.dropout_min_epochs)

    def _decide(self, trainer: pl.Trainer, pl_module: Any, steps: float) -> None:
        steps_per_epoch = max(trainer.num_training_batches / trainer.accumulate_grad_batches, 1.0)
        self.epochs = steps / steps_per_epoch
        dropout = self.epochs >= self.dropout_min_epochs
        log.info(
            "budget: about %.1f epochs (%.0f steps of %.0f per epoch) -> dropout %s (%s %g epochs)",
            self.epochs,
            steps,
            steps_per_epoch,
            f"{pl_module.model.cfg.dropout:g}" if dropout else "off",
            "at least" if dropout else "under",
            self.dropout_min_epochs,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epochs = state_dict.get("epochs")
