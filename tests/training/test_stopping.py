"""When a run validates and stops (seq2seq/training/stopping.py): a corpus of a few steps an epoch
validated as the CPU recipe says (twice an epoch) trains past its warm-up to its budget, early
stopping still ends a run that has stopped improving, and every stop says why in one line."""

from __future__ import annotations

import logging
import re

import pytest

from seq2seq.config import OptimConfig
from seq2seq.formats.checkpoint import read_checkpoint
from seq2seq.launch.start import start_run
from seq2seq.training.stopping import counting_from
from tests.helpers.compose import tiny_job
from tests.helpers.step_clock import step_clock

TWICE_AN_EPOCH = ("trainer.val_check_interval=0.5", "trainer.max_epochs=-1")  # the CPU recipe's cadence


def run_logged(tmp_path, caplog, *overrides: str) -> tuple[list[int], str]:
    """A tiny run; the steps it validated at and its ``stopped at ...`` line."""
    caplog.set_level(logging.INFO, logger="seq2seq")
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *overrides))
    steps = [int(step) for step in re.findall(r"validation at step (\d+):", caplog.text)]
    stopped = [line for r in caplog.records if (line := r.getMessage()).startswith("stopped at step ")]
    assert len(stopped) == 1, caplog.text[-2000:]
    return steps, stopped[0]


def last_step(tmp_path) -> int:
    return read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")["global_step"]


def test_a_small_corpus_validated_twice_an_epoch_trains_past_its_warmup_to_its_budget(tmp_path, caplog):
    """An epoch of the tiny corpus is a few steps; with a validation every step or two and a patience
    of 1, early stopping would end the run within its warm-up, at BLEU 0."""
    steps, stopped = run_logged(
        tmp_path, caplog, *TWICE_AN_EPOCH, "trainer.max_steps=40", "optim.warmup_steps=30",
        "callbacks.min_steps_between_validations=10", "callbacks.early_stopping_patience=1",
    )  # fmt: skip
    assert steps == [10, 20, 30, 40]
    assert last_step(tmp_path) == 40
    assert stopped.endswith(": trainer.max_steps=40 reached")
    assert "validation: every 10 steps (callbacks.min_steps_between_validations), not every" in caplog.text


def test_early_stopping_ends_a_run_that_stopped_improving_once_warm_and_says_so(tmp_path, caplog) -> None:
    """A learning rate too small to change a translation: the first validation after the warm-up
    sets the score to beat, and the next, no better, ends the run."""
    steps, stopped = run_logged(
        tmp_path, caplog, *TWICE_AN_EPOCH, "trainer.max_steps=100", "optim.warmup_steps=10",
        "optim.lr=1e-12", "callbacks.early_stopping_patience=1",
    )  # fmt: skip
    assert steps == [8, 16, 24]  # an epoch is 16 steps; step 8 is in the warm-up
    assert re.fullmatch(
        r"stopped at step 24 \(epoch \d+\): early stopping: val/bleu did not rise above \d+\.\d\d in 1 "
        r"validations \(callbacks\.early_stopping_patience=1\)",
        stopped,
    ), stopped


def test_a_run_says_which_limit_stopped_it(tmp_path, caplog, monkeypatch) -> None:
    step_clock(monkeypatch, 1.0)  # a second a step
    _, stopped = run_logged(tmp_path, caplog, "trainer.max_time=00:00:00:05", "trainer.max_epochs=-1")
    assert re.fullmatch(r"stopped at step 5 \(epoch \d+\): trainer\.max_time 0:00:05 reached", stopped), (
        stopped
    )
    assert "limits: max_time 0:00:05" in caplog.text


def test_a_run_at_its_epoch_limit_says_so(tmp_path, caplog) -> None:
    _, stopped = run_logged(tmp_path, caplog, "trainer.max_epochs=1")
    assert re.fullmatch(r"stopped at step \d+ \(epoch 1\): trainer.max_epochs=1 reached", stopped), stopped


@pytest.mark.parametrize(
    ("schedule", "expected"), [("inverse_sqrt", (200, 0.0)), ("wsd", (200, pytest.approx(0.6)))]
)
def test_early_stopping_counts_from_the_warmups_end_and_under_wsd_from_the_decays_start(
    schedule: str, expected: tuple[int, float]
) -> None:
    assert counting_from(OptimConfig(warmup_steps=200, schedule=schedule, decay_share=0.4)) == expected
