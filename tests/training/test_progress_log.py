"""Training writes plain progress lines, every so many steps or seconds and at each validation,
to the log and, where no progress bar is drawn on a terminal, to the console."""

from __future__ import annotations

import logging
import re
import sys

import pytest
import pytorch_lightning as pl
import torch

from seq2seq.launch.start import start_run
from seq2seq.training.budget import clock_time
from seq2seq.training.progress_log import TO_CONSOLE, ConsoleFilter, EpochBar, progress_bar
from tests.helpers.compose import tiny_job
from tests.helpers.in_process import python
from tests.helpers.step_clock import step_clock

STEP_LINE = re.compile(
    r"step (\d+) \| epoch \d+ \| loss [\d.]+ \| lr [\d.e+-]+ \| \d+ tokens/s"
    r" \| elapsed \d+:\d\d:\d\d \| left \S+"
)


def progress_steps(text: str) -> list[int]:
    return [int(step) for step in STEP_LINE.findall(text)]


@pytest.mark.parametrize(
    ("every", "expected"),
    [
        (("callbacks.progress_every_n_steps=4", "callbacks.progress_every_s=0"), [4, 8, 12]),
        (("callbacks.progress_every_n_steps=0", "callbacks.progress_every_s=6"), [3, 6, 9, 12]),  # 2 s a step
        (
            ("callbacks.progress_every_n_steps=4", "callbacks.progress_every_s=6"),
            [3, 6, 9, 12],
        ),  # whichever first
    ],
    ids=["steps", "seconds", "first"],
)
def test_a_line_every_n_steps_or_seconds(tmp_path, caplog, monkeypatch, every, expected) -> None:
    caplog.set_level(logging.INFO, logger="seq2seq.training.progress_log")
    step_clock(monkeypatch, 2.0)
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", "trainer.max_steps=12", *every))
    assert progress_steps(caplog.text) == expected
    assert "left 0:00:" in caplog.text  # a step budget: the time left is known


def test_each_validation_says_its_scores_and_whether_it_is_the_best(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="seq2seq.training.progress_log")
    off = ("callbacks.progress_every_n_steps=0", "callbacks.progress_every_s=0")  # validations' lines only
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *off))
    lines = re.findall(r"validation at step (\d+): BLEU ([\d.]+), chrF [\d.]+, (.*)", caplog.text)
    assert len(lines) == 2 and lines[0][2] == "the best so far"  # tiny: two epochs, one validation each
    assert lines[1][2] == "the best so far" or lines[1][2] == f"best {lines[0][1]}"
    best = torch.load(tmp_path / "run" / "checkpoints" / "best.ckpt", weights_only=True)
    best_step = int([step for step, _, said in lines if said == "the best so far"][-1])
    assert best["global_step"] == best_step  # a BLEU tie keeps the earlier best.ckpt, and says so
    assert not progress_steps(caplog.text)


def test_progress_lines_stay_off_only_a_console_marked_for_the_bar() -> None:
    def record(**extra: bool) -> logging.LogRecord:
        line = logging.LogRecord("seq2seq", logging.INFO, __file__, 1, "step 5", None, None)
        line.__dict__.update(extra)
        return line

    assert ConsoleFilter().filter(record()) and ConsoleFilter().filter(record(**{TO_CONSOLE: True}))
    assert not ConsoleFilter().filter(record(**{TO_CONSOLE: False}))
    assert clock_time(3725.9) == "1:02:05"


def test_train_py_writing_to_a_file_shows_progress_and_validations_as_it_trains(tmp_path) -> None:
    """``python train.py > log.txt 2>&1``: stdout is no terminal, so the lines reach it, plain, one a line."""
    result = python(
        "train.py",
        "experiment=tiny",
        "trainer.max_epochs=1",
        "callbacks.progress_every_n_steps=5",
        "callbacks.progress_bar=true",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"data.cache_dir={tmp_path / 'cache'}",
        stderr_to_stdout=True,
    )
    text = result.stdout
    assert result.returncode == 0, text[-3000:]
    assert progress_steps(text)[:2] == [5, 10]
    assert re.search(r"\]\[seq2seq\.training\.progress_log\]\[INFO\] - validation at step \d+: BLEU", text)
    log = (tmp_path / "run" / "train.log").read_text()
    assert progress_steps(log) == progress_steps(text)
    assert not re.search(r"Epoch \d", text)  # no frame of a progress bar in a file
    assert re.search(r"stopped at step \d+ \(epoch 1\): trainer.max_epochs=1 reached\n", log)


def test_a_bar_is_drawn_only_on_a_terminal(monkeypatch) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert progress_bar(True) is None
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert isinstance(progress_bar(True), EpochBar) and progress_bar(False) is None


@pytest.mark.parametrize(("max_epochs", "shown"), [(-1, "Epoch 4"), (10, "Epoch 4/9")])
def test_the_bar_counts_epochs_without_a_negative_total(max_epochs: int, shown: str) -> None:
    bar = EpochBar()
    trainer = pl.Trainer(max_epochs=max_epochs, callbacks=[bar], logger=False, enable_checkpointing=False)
    bar.setup(trainer, trainer.lightning_module, "fit")
    assert bar._get_train_description(4).strip() == shown
