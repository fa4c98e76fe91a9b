"""Training faults: kill -9, Ctrl-C, mid-epoch resume, non-finite loss, unusable paths, full disk."""

import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from seq2seq.command_line import INTERRUPTED
from seq2seq.config import ConfigError, DataError, validated_run
from seq2seq.formats import run_directory
from seq2seq.formats.checkpoint import CheckpointError
from seq2seq.launch.start import start_run
from seq2seq.training import run as training
from seq2seq.training.module import NonFiniteLossError
from tests.helpers.compose import ROOT, tiny_job, tiny_run
from tests.helpers.in_process import python


def final_state(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)


class CrashAtStep(pl.Callback):
    """Simulates a crash (power loss, OOM kill) right after a given optimizer step."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("simulated crash")


def train_with_crash(cfg, step: int) -> None:
    original = training.build_trainer

    def build(*args):
        trainer = original(*args)
        trainer.callbacks.append(CrashAtStep(step))
        return trainer

    training.build_trainer = build
    try:
        with pytest.raises(RuntimeError, match="simulated crash"):
            start_run(validated_run(cfg))
    finally:
        training.build_trainer = original


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[dict, Path]:
    """(final state, data cache) of a 3-epoch run that nothing stopped: the reference each crash
    point's run resumes to, trained once for all of them; the crashed runs read its cache."""
    tmp_path = tmp_path_factory.mktemp("uninterrupted")
    start_run(tiny_job(tmp_path / "full", tmp_path / "cache", "trainer.max_epochs=3"))
    return final_state(tmp_path / "full"), tmp_path / "cache"


@pytest.mark.parametrize("epoch_fraction", [0.0, 0.5])
def test_resume_after_a_crash_matches_an_uninterrupted_run(tmp_path, epoch_fraction, uninterrupted):
    full, cache = uninterrupted
    steps_per_epoch = full["global_step"] // 3
    crash_at = steps_per_epoch + int(epoch_fraction * steps_per_epoch) or steps_per_epoch + 1
    crashed = tmp_path / "crashed"
    train_with_crash(
        tiny_run(crashed, cache, "trainer.max_epochs=3", "callbacks.checkpoint_every_n_steps=1"), crash_at
    )
    last = crashed / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == crash_at
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start_run(tiny_job(crashed, cache, "trainer.max_epochs=3", f"ckpt_path={last}"))
    assert not [w for w in caught if "resuming from a checkpoint" in str(w.message)]  # resumes exactly
    resumed = final_state(crashed)
    assert resumed["global_step"] == full["global_step"]
    for name, weight in full["state_dict"].items():  # same batches in the same order -> same weights
        torch.testing.assert_close(resumed["state_dict"][name], weight, msg=name)


def _training(tmp_path: Path, *overrides: str) -> list[str]:
    """``train.py``'s arguments for the tiny experiment with a checkpoint at every step."""
    return [
        "train.py",
        "experiment=tiny",
        "callbacks.checkpoint_every_n_steps=1",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        *overrides,
    ]


def _start_training(tmp_path: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *_training(tmp_path, *overrides)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)


def _wait_for_text(path: Path, text: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.05)


@pytest.mark.slow
def test_kill_9_then_resume_finishes_with_the_same_step_count(tmp_path, uninterrupted):
    process = _start_training(tmp_path, "trainer.max_epochs=3")
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    _wait_for(last, process)
    time.sleep(1.0)
    process.kill()  # SIGKILL: no handler runs
    process.wait()
    state = torch.load(last, weights_only=True)  # atomic writes: never half a file
    assert state["global_step"] > 0
    resume = python(*_training(tmp_path, "trainer.max_epochs=3", f"ckpt_path={last}"))
    assert resume.returncode == 0, resume.stderr[-2000:]
    assert final_state(tmp_path / "run")["global_step"] == uninterrupted[0]["global_step"]


@pytest.mark.slow
def test_ctrl_c_saves_a_resumable_checkpoint(tmp_path):
    """A run with no limit, so only the Ctrl-C can stop it, sent once it has trained a few steps."""
    process = _start_training(
        tmp_path,
        "trainer.max_epochs=-1",
        "callbacks.checkpoint_every_n_steps=0",
        "callbacks.progress_every_n_steps=3",
    )
    train_log = tmp_path / "run" / "train.log"
    _wait_for(train_log, process)
    _wait_for_text(train_log, "] - step 3 |", process)
    os.kill(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=120)
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert last.is_file(), err[-2000:]
    assert "Traceback" not in err
    assert "Ctrl-C: stopping after this batch" in out  # Hydra logs to stdout
    assert "reached" not in err  # stopped by the Ctrl-C, not by max_epochs
    assert process.returncode == INTERRUPTED
    assert torch.load(last, weights_only=True)["global_step"] > 0


def test_non_finite_loss_stops_with_the_step(tmp_path):
    overrides = ("optim.lr=1e12", "optim.warmup_steps=1", "trainer.gradient_clip_val=0")
    with pytest.raises(NonFiniteLossError, match=r"at step \d+"):
        start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *overrides))
    assert not (tmp_path / "run" / "checkpoints" / "best.ckpt").exists()


def test_non_finite_batches_can_be_skipped(tmp_path, caplog):
    overrides = (
        "optim.lr=1e12",
        "optim.warmup_steps=1",
        "trainer.gradient_clip_val=0",
        "skip_nonfinite=true",
    )
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", "trainer.max_epochs=1", *overrides))
    assert "non-finite loss" in caplog.text


def test_unwritable_output_dir_fails_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="not writable"):
        start_run(tiny_job(blocker / "run", tmp_path / "cache"))


def test_missing_data_file_and_missing_checkpoint_are_clear(tmp_path):
    with pytest.raises(DataError, match=r"no-such\.tsv"):
        start_run(tiny_job(tmp_path / "run", tmp_path / "cache", "data.path=no-such.tsv"))
    with pytest.raises(ConfigError, match="no checkpoint at"):
        start_run(tiny_job(tmp_path / "run", tmp_path / "cache", f"ckpt_path={tmp_path / 'nope.ckpt'}"))


def test_disk_nearly_full_fails_before_training(tmp_path, monkeypatch):
    nearly_full = shutil.disk_usage(tmp_path)._replace(free=20 * 2**20)
    monkeypatch.setattr(run_directory.shutil, "disk_usage", lambda path: nearly_full)
    with pytest.raises(ConfigError, match="has only 20 MiB free"):
        start_run(tiny_job(tmp_path / "run", tmp_path / "cache"))
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_disk_full_while_saving_keeps_the_previous_checkpoint(tmp_path):
    """The write of the next last.ckpt hits a real ENOSPC: writes to /dev/full always do."""
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", "trainer.max_epochs=1"))
    checkpoints = tmp_path / "run" / "checkpoints"
    before = (checkpoints / "last.ckpt").read_bytes()
    (checkpoints / ".last.ckpt.partial").symlink_to("/dev/full")  # where the next save writes first
    resume = f"ckpt_path={checkpoints / 'last.ckpt'}"
    with pytest.raises(CheckpointError, match=r"cannot write checkpoint .*last\.ckpt"):
        start_run(tiny_job(tmp_path / "run", tmp_path / "cache", "trainer.max_epochs=2", resume))
    assert (checkpoints / "last.ckpt").read_bytes() == before
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best.ckpt", "last.ckpt"]
