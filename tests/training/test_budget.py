"""The run's budget: the warmup-stable-decay schedule reaches zero where the run ends, and dropout
is switched on only for runs that will see enough epochs, whether steps or time bound the run."""

from __future__ import annotations

import itertools
import logging
import math
import re
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.config import ConfigError, ModelConfig, OptimConfig, validated_run
from seq2seq.launch.start import start_run
from seq2seq.model import Transformer
from seq2seq.model.attention import MultiHeadAttention
from seq2seq.model.dropout import Dropout
from seq2seq.training import budget
from seq2seq.training.budget import (
    MEASURE_SECONDS,
    MEASURE_SHARE,
    MEASURE_STEPS,
    WARMUP_SHARE,
    estimated_steps,
    measuring_window,
    set_dropout,
    step_share,
)
from seq2seq.training.optimizers import wsd_factor
from tests.helpers.compose import tiny_job, tiny_run
from tests.helpers.step_clock import step_clock


def test_wsd_warms_up_holds_then_decays_linearly_to_zero() -> None:
    assert wsd_factor(0, 10, 0.0, 0.4) == pytest.approx(0.1)
    assert wsd_factor(9, 10, 0.3, 0.4) == 1.0
    assert wsd_factor(50, 10, 0.6, 0.4) == 1.0
    assert wsd_factor(50, 10, 0.8, 0.4) == pytest.approx(0.5)
    assert wsd_factor(50, 10, 1.0, 0.4) == 0.0
    assert wsd_factor(50, 10, 0.9, 0.0) == 1.0  # no decay share: constant after warmup


def test_wsd_decays_as_one_minus_the_square_root_of_the_decay_done() -> None:
    assert wsd_factor(50, 10, 0.6, 0.4, "1-sqrt") == 1.0
    assert wsd_factor(50, 10, 0.7, 0.4, "1-sqrt") == pytest.approx(0.5)  # a quarter of the decay done
    assert wsd_factor(50, 10, 0.8, 0.4, "1-sqrt") == pytest.approx(1 - 0.5**0.5)
    assert wsd_factor(50, 10, 1.0, 0.4, "1-sqrt") == 0.0


def test_step_share_counts_the_step_in_progress_and_ignores_an_endless_budget() -> None:
    assert step_share(0, 4) == 0.25 and step_share(3, 4) == 1.0
    assert step_share(10, math.inf) == 0.0


def test_set_dropout_switches_every_dropout_off_and_back() -> None:
    cfg = ModelConfig(d_model=16, n_heads=2, d_ff=32, dropout=0.3, attention_dropout=0.2)
    model = Transformer(cfg, 50, 50)
    dropouts = [m for m in model.modules() if isinstance(m, Dropout)]
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert dropouts and attentions
    set_dropout(model, False)
    assert {m.p for m in dropouts} == {0.0} and {m.dropout for m in attentions} == {0.0}
    set_dropout(model, True)
    assert {m.p for m in dropouts} == {0.3} and {m.dropout for m in attentions} == {0.2}


def test_bad_schedule_values_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"optim\.schedule must be one of inverse_sqrt, wsd"):
        OptimConfig(schedule="cosine")
    with pytest.raises(ConfigError, match=r"optim\.dropout_min_epochs must be >= 0"):
        OptimConfig(dropout_min_epochs=-1)


def logged_lr(run_dir: Path) -> list[float]:
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return [event.value for event in events.Scalars("train/lr")]


def test_wsd_run_ends_its_step_budget_with_the_lr_near_zero(tmp_path) -> None:
    steps = 24
    start_run(
        validated_run(
            tiny_run(
                tmp_path / "run",
                tmp_path / "cache",
                f"trainer.max_steps={steps}",
                "trainer.max_epochs=-1",
                "optim.schedule=wsd",
                "optim.warmup_steps=4",
                "optim.decay_share=0.5",
            )
        )
    )
    lrs = logged_lr(tmp_path / "run")
    peak = 3.0e-3  # the tiny experiment's optim.lr
    assert len(lrs) == steps
    assert lrs[4:13] == pytest.approx([peak] * 9)  # warmed up, and stable for the first half
    decaying = lrs[12:]
    assert all(a > b for a, b in itertools.pairwise(decaying))
    assert lrs[-1] < 0.15 * peak
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert events.Scalars("val/bleu")[-1].step == steps - 1  # the end is validated (logged at step - 1)


def budget_line(caplog: pytest.LogCaptureFixture) -> str:
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("budget: about")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("min_epochs", "dropout"), [(1, "dropout 0.1"), (3, "dropout off")])
def test_dropout_needs_a_budget_of_enough_epochs(tmp_path, caplog, min_epochs, dropout) -> None:
    caplog.set_level(logging.INFO, logger="seq2seq.training.budget")
    overrides = ("model.dropout=0.1", f"optim.dropout_min_epochs={min_epochs}")  # tiny: max_epochs=2
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *overrides))
    line = budget_line(caplog)
    assert line.startswith("budget: about 2.0 epochs") and dropout in line


def test_the_step_rate_is_trusted_after_its_warm_up_and_enough_steps() -> None:
    window = measuring_window(10.0, 110.0)  # a 2-minute run: 6 seconds, 3 of them warm-up
    assert window == min(MEASURE_SECONDS, MEASURE_SHARE * 120)
    measured = (1.0 - WARMUP_SHARE) * window
    assert estimated_steps(3, 2, 8.0, window, 110.0) is None  # too few steps
    assert estimated_steps(12, MEASURE_STEPS, measured / 2, window, 110.0) is None  # too short a time
    expected = 12 + MEASURE_STEPS / measured * 110.0
    assert estimated_steps(12, MEASURE_STEPS, measured, window, 110.0) == expected


def test_a_time_limited_run_measures_its_step_rate_before_deciding(tmp_path, caplog, monkeypatch) -> None:
    """Each step takes 0.4 s of a clock that the steps drive, on any machine: 15 steps in 6 s."""
    caplog.set_level(logging.INFO, logger="seq2seq.training.budget")
    monkeypatch.setattr(budget, "MEASURE_STEPS", 3)  # a 6-second run of 0.4-second steps makes few
    step_clock(monkeypatch, 0.4)
    overrides = (
        "trainer.max_time=00:00:00:06",
        "trainer.max_epochs=-1",
        "trainer.val_check_interval=null",
        "trainer.check_val_every_n_epoch=1000",
        "model.dropout=0.1",
        "optim.dropout_min_epochs=1000000",
    )
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *overrides))
    estimated_steps = float(re.search(r"\(([\d.]+) steps of", budget_line(caplog)).group(1))
    done = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert done["global_step"] == 15
    assert 0.3 < estimated_steps / done["global_step"] < 3  # the estimate is the right size
    assert "dropout off" in budget_line(caplog)


def test_the_estimate_leaves_out_the_slow_first_steps(tmp_path, caplog, monkeypatch) -> None:
    """Two slow steps (0.5 s), then 0.1-second steps for the rest of a 6-second budget: the
    rate measured after the warm-up predicts the steps made within 15 %; counting the slow steps
    (as a rate from the first step on would) predicts a quarter too few."""
    caplog.set_level(logging.INFO, logger="seq2seq.training.budget")
    step_clock(monkeypatch, 0.1, slow_steps=2, slow_seconds=0.5)
    overrides = (
        "trainer.max_time=00:00:00:06",
        "trainer.max_epochs=-1",
        "trainer.val_check_interval=null",
        "trainer.check_val_every_n_epoch=1000",
        "logger.tensorboard=false",
        "optim.dropout_min_epochs=1000000",
    )
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *overrides))
    made = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    assert made == 2 + round((6 - 2 * 0.5) / 0.1)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("budget:")]
    estimated = float(re.search(r"\(([\d.]+) steps of", lines[0]).group(1))
    assert abs(estimated / made - 1) < 0.15
    assert lines[-1].startswith(f"budget: {made} steps made; {estimated:.0f} estimated at step ")
