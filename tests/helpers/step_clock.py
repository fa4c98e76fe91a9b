"""A clock that reads the training step, so that time limits, time-based validation, the step
rate and the progress lines happen at the same steps on every machine, however fast or busy."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
from pytorch_lightning.callbacks import timer
from pytorch_lightning.loops import evaluation_loop, fit_loop, training_epoch_loop

from seq2seq.training import budget, progress_log
from seq2seq.training import run as training

# Every module whose time.monotonic() a run's time-based decisions read.
CLOCKED = (timer, fit_loop, training_epoch_loop, evaluation_loop, budget, progress_log)


class StepClock:
    """``seconds_per_step`` seconds pass with each optimizer step and no time passes otherwise; the
    first ``slow_steps`` steps take ``slow_seconds`` each instead, as a GPU's first steps do."""

    def __init__(self, seconds_per_step: float, slow_steps: int = 0, slow_seconds: float = 0.0) -> None:
        self.seconds_per_step = seconds_per_step
        self.slow_steps, self.slow_seconds = slow_steps, slow_seconds
        self.trainer: pl.Trainer | None = None

    def monotonic(self) -> float:
        if self.trainer is None:
            return 0.0
        step = self.trainer.global_step
        slow = min(step, self.slow_steps)
        return slow * self.slow_seconds + (step - slow) * self.seconds_per_step


def step_clock(
    monkeypatch: pytest.MonkeyPatch, seconds_per_step: float, slow_steps: int = 0, slow_seconds: float = 0.0
) -> StepClock:
    """Installs a :class:`StepClock` for the runs that ``training.train`` builds from now on."""
    clock = StepClock(seconds_per_step, slow_steps, slow_seconds)
    build_trainer = training.build_trainer

    def build_with_clock(*args: object) -> pl.Trainer:
        clock.trainer = build_trainer(*args)
        return clock.trainer

    monkeypatch.setattr(training, "build_trainer", build_with_clock)
    for module in CLOCKED:
        monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=clock.monotonic))
    return clock
