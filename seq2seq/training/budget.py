"""The run's budget, measured while it runs: the share of it spent, which the LR schedule follows
(:func:`seq2seq.training.optimizers.lr_schedule`), and whether dropout pays.

A run ends at ``trainer.max_steps``, ``max_epochs`` or ``max_time``, whichever comes first, so the
same 30-minute config sees a couple of epochs on a slow CPU and dozens on a GPU. A run of few
epochs underfits: it trains best without dropout and with an LR that decays to zero by its end
(docs/training.md, Budget).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Timer

from seq2seq.model import Transformer
from seq2seq.model.attention import MultiHeadAttention
from seq2seq.model.dropout import Dropout

log = logging.getLogger(__name__)

MEASURE_SECONDS = 60.0  # training time over which the step rate is measured (less in short runs)
MEASURE_SHARE = 0.05  # ...or this share of max_time, whichever is shorter
MEASURE_STEPS = 10  # ...and at least this many steps
WARMUP_SHARE = 0.5  # the first half of that window is warm-up, left out of the rate


def clock_time(seconds: float) -> str:
    """``H:MM:SS`` for a duration in seconds."""
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


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


def measuring_window(elapsed: float, remaining: float) -> float:
    """Seconds of training after which the step rate is known, for a ``max_time`` of ``elapsed`` +
    ``remaining`` seconds: :data:`MEASURE_SECONDS`, or :data:`MEASURE_SHARE` of a short run."""
    return min(MEASURE_SECONDS, MEASURE_SHARE * (elapsed + remaining))


def estimated_steps(step: int, measured: int, spent: float, window: float, remaining: float) -> float | None:
    """The steps a time-limited run will have made at its end, said at ``step`` from ``measured``
    steps that took ``spent`` seconds, with ``remaining`` seconds of ``max_time`` left. None while
    the measurement covers less than the part of ``window`` after its warm-up, or fewer than
    :data:`MEASURE_STEPS` steps. The warm-up is left out because a GPU's first steps are several
    times slower than the rest (new shapes, the allocator growing), so a rate that counts them
    underestimates the run many times over."""
    if spent < (1.0 - WARMUP_SHARE) * window or measured < MEASURE_STEPS:
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
    """Before each step, measures ``spent``: the share of the budget spent once that step is done.
    Once the step rate is known (measured after a warm-up), estimates the epochs the run will see
    and keeps dropout off below ``dropout_min_epochs``; the decision is logged and kept across
    resumes, and the run's end logs the estimate against the steps made. Under DDP, rank 0's share
    and step-rate measurement are broadcast, so every rank schedules alike.
    """

    def __init__(self, dropout_min_epochs: float) -> None:
        self.dropout_min_epochs = dropout_min_epochs
        self.spent = 0.0  # the share of the budget spent once the step in progress is done
        self.epochs: float | None = None  # the estimate, once made
        self._step_budget = math.inf  # max_steps, or max_epochs worth of steps, known at the start
        self._started: float | None = None  # the clock at the first step's end
        self._measure_from: tuple[float, int, float] | None = None  # (clock, step, compile s) at its start
        self._compiling = 0.0  # seconds of compiling the step rate left out
        self._estimate: tuple[int, float] | None = None  # (step, steps estimated) at the decision

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self._step_budget = trainer.estimated_stepping_batches
        if self.dropout_min_epochs <= 0:
            return
        if self.epochs is None and time_limit(trainer) is None:  # the steps alone decide
            self._decide(trainer, pl_module, self._step_budget)
        set_dropout(pl_module.model, self.epochs is not None and self.epochs >= self.dropout_min_epochs)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        spent = max(step_share(trainer.global_step, self._step_budget), time_share(trainer))
        self.spent = min(1.0, trainer.strategy.broadcast(spent))  # one LR on every rank

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.dropout_min_epochs <= 0 or self.epochs is not None:
            return
        timer = time_limit(trainer)  # not None: step budgets decide at the start
        now, step = time.monotonic(), trainer.global_step
        if self._started is None:  # the first step's end starts the clock: it paid for set-up
            self._started = now
            return
        window = measuring_window(timer.time_elapsed(), timer.time_remaining())
        steps = None
        if self._measure_from is None:
            if now - self._started >= WARMUP_SHARE * window:
                self._measure_from = (now, step, pl_module.compile_seconds())
        else:  # new shapes' compiles are no steps: the rate leaves them out
            started, first_step, compiled = self._measure_from
            self._compiling = pl_module.compile_seconds() - compiled
            spent = now - started - self._compiling
            estimate = estimated_steps(step, step - first_step, spent, window, timer.time_remaining())
            steps = None if estimate is None else min(self._step_budget, estimate)
        # Every rank broadcasts at every step until the decision: rank 0's clock alone says when and
        # how many steps, so the ranks decide at the same step and never wait on a skipped broadcast.
        steps = trainer.strategy.broadcast(steps)
        if steps is None:
            return
        self._estimate = (step, steps)
        self._decide(trainer, pl_module, steps)
        set_dropout(pl_module.model, self.epochs >= self.dropout_min_epochs)

    def on_train_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        """The estimate against the steps the run made: how far the dropout rule could trust it."""
        if self._estimate is None or trainer.interrupted:
            return
        at_step, estimate = self._estimate
        made = trainer.global_step
        log.info(
            "budget: %d steps made; %.0f estimated at step %d (%+.0f%%)",
            made,
            estimate,
            at_step,
            100 * (estimate - made) / max(made, 1),
        )

    def _decide(self, trainer: pl.Trainer, pl_module: Any, steps: float) -> None:
        steps_per_epoch = max(trainer.num_training_batches / trainer.accumulate_grad_batches, 1.0)
        self.epochs = steps / steps_per_epoch
        dropout = self.epochs >= self.dropout_min_epochs
        log.info(
            "budget: about %.1f epochs (%.0f steps of %.0f per epoch%s) -> dropout %s (%s %g epochs)",
            self.epochs,
            steps,
            steps_per_epoch,
            f", the step rate without {self._compiling:.1f} s of compiling" if self._compiling else "",
            f"{pl_module.model.cfg.dropout:g}" if dropout else "off",
            "at least" if dropout else "under",
            self.dropout_min_epochs,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epochs = state_dict.get("epochs")


def budget_spent(trainer: pl.Trainer) -> Callable[[], float]:
    """Reads the share of the budget spent as the trainer's :class:`Budget` last measured it (0 for
    a trainer without one): the progress the LR schedule follows."""
    budget = next((c for c in trainer.callbacks if isinstance(c, Budget)), None)
    return (lambda: 0.0) if budget is None else (lambda: budget.spent)
