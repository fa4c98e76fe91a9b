"""A completed run ends with a validation, whichever limit stops it, even one that comes before
the first scheduled validation: every run leaves ``best.ckpt`` and its score."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seq2seq.launch.start import start_run
from tests.helpers.compose import tiny_job
from tests.helpers.step_clock import step_clock

NEVER_BY_EPOCH = "trainer.check_val_every_n_epoch=1000"  # the schedule alone would never validate

LIMITS = {
    "epochs": (
        "trainer.max_epochs=1",
        "trainer.val_check_interval=00:00:10:00",
        "trainer.check_val_every_n_epoch=null",
    ),
    "steps": ("trainer.max_steps=5", "trainer.max_epochs=-1", NEVER_BY_EPOCH),
    "time": ("trainer.max_time=00:00:00:05", "trainer.max_epochs=-1", NEVER_BY_EPOCH),  # a second a step
}


def saved_step(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True)["global_step"]


@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_a_run_stopped_before_its_first_scheduled_validation_validates_its_last_step(
    tmp_path, monkeypatch, limit
) -> None:
    step_clock(monkeypatch, 1.0)
    metrics = start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *LIMITS[limit]))
    checkpoints = tmp_path / "run" / "checkpoints"
    last_step = saved_step(checkpoints / "last.ckpt")
    assert last_step > 0 and saved_step(checkpoints / "best.ckpt") == last_step
    assert {"val/bleu", "val/chrf", "hp/best_bleu"} <= metrics.keys()
    if limit != "epochs":
        assert last_step == 5


def test_a_run_validated_at_its_last_step_is_not_validated_again(tmp_path, caplog) -> None:
    caplog.set_level("INFO", logger="seq2seq.training.progress_log")
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", "trainer.max_epochs=1"))  # validates each epoch
    assert caplog.text.count("validation at step") == 1
