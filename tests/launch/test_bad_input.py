"""A run that cannot start (a bad resume checkpoint, a bad value, no pair left): one line before
the run writes, and nothing of the user's lost, so the corrected command starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from seq2seq.config import ConfigError, DataError
from seq2seq.formats.run_directory import RunDirectory
from seq2seq.launch.start import start_run
from tests.helpers.bad_input import KINDS, bad_checkpoint, one_line
from tests.helpers.compose import ROOT, tiny_job
from tests.helpers.in_process import python

RESUME_KINDS = (*KINDS, "other model")


@pytest.mark.parametrize("kind", RESUME_KINDS)
def test_a_bad_resume_checkpoint_is_one_line_before_the_run_writes(
    checkpoint: Path, tmp_path: Path, kind: str
) -> None:
    if kind == "other model":  # the fixture's model is configs/model/tiny.yaml's, 32 wide
        path, overrides = checkpoint, ["model.d_model=64"]
        reason = f"{path} has model.d_model=32, this run model.d_model=64: set it as the checkpoint has it"
    else:
        path, reason = bad_checkpoint(kind, checkpoint, tmp_path)
        overrides, reason = [], f"cannot read checkpoint {path}: {reason}"
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError) as failure:
        start_run(tiny_job(run_dir, tmp_path / "cache", f"ckpt_path={path}", *overrides))
    assert str(failure.value) == f"ckpt_path: {reason}"
    assert not run_dir.exists() and not (tmp_path / "cache").exists()


def test_train_py_refuses_a_bad_resume_checkpoint_and_leaves_its_directory_free(
    checkpoint: Path, tmp_path: Path
) -> None:
    """The corrected command must not meet the failed one's run as 'an earlier run' to resume."""
    path, reason = bad_checkpoint("truncated", checkpoint, tmp_path)
    run_dir = tmp_path / "run"
    result = python(
        str(ROOT / "train.py"), "experiment=tiny", f"hydra.run.dir={run_dir}", f"ckpt_path={path}",
        f"data.cache_dir={tmp_path / 'cache'}",
    )  # fmt: skip
    assert result.returncode == 1
    assert one_line(result.stderr) == f"error: ckpt_path: cannot read checkpoint {path}: {reason}"
    assert not run_dir.exists()
    RunDirectory.claim(
        run_dir, resumes=False, overwrite=False
    ).release()  # what the corrected command does first


def test_a_config_error_keeps_the_directory_the_user_made_and_their_files(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tokenizer.json").write_text('{"mine": true}', encoding="utf-8")  # a name the run writes too
    result = python(
        str(ROOT / "train.py"), "experiment=tiny", f"hydra.run.dir={mine}", "optim.lr=-1",
        f"data.cache_dir={tmp_path / 'cache'}",
    )  # fmt: skip
    assert result.returncode == 1
    assert one_line(result.stderr) == "error: optim.lr must be > 0, got -1.0"
    assert [path.name for path in mine.iterdir()] == ["tokenizer.json"]
    assert (mine / "tokenizer.json").read_text(encoding="utf-8") == '{"mine": true}'


def test_a_bad_optimizer_value_is_one_line_and_the_corrected_command_trains(tmp_path: Path) -> None:
    """It was a traceback that left a run directory, which then refused the corrected command."""
    run_dir = tmp_path / "run"
    argv = [
        str(ROOT / "train.py"), "experiment=tiny", f"hydra.run.dir={run_dir}", "trainer.max_steps=2",
        f"data.cache_dir={tmp_path / 'cache'}",
    ]  # fmt: skip
    result = python(*argv, "optim.weight_decay=-1")
    assert result.returncode == 1
    assert one_line(result.stderr) == "error: optim.weight_decay must be >= 0, got -1.0"
    assert not run_dir.exists()
    result = python(*argv)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (run_dir / "checkpoints" / "best.ckpt").is_file()


def test_a_max_length_that_drops_every_pair_is_one_line_before_training(tmp_path: Path) -> None:
    """It trained nothing and exited 0 without a checkpoint."""
    run_dir = tmp_path / "run"
    message = r"^data\.max_length=1 drops all \d+ training pairs, each longer: raise it, or set data\."
    with pytest.raises(DataError, match=message):
        start_run(tiny_job(run_dir, tmp_path / "cache", "data.max_length=1"))
    assert not run_dir.exists()


def test_a_failed_start_removes_only_what_it_added(tmp_path: Path) -> None:
    """As train.py fails before training: claimed, Hydra's files written, then discarded."""
    made, existing = tmp_path / "runs" / "new", tmp_path / "existing"
    existing.mkdir()
    (existing / "config.yaml").write_text("mine\n", encoding="utf-8")
    for run_dir in (made, existing):
        claimed = RunDirectory.claim(run_dir, resumes=False, overwrite=False)
        (run_dir / ".hydra").mkdir(exist_ok=True)
        (run_dir / "train.log").write_text("started\n", encoding="utf-8")
        claimed.release()
        claimed.discard_unstarted()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["existing"]  # runs/ was made for the run
    assert [path.name for path in existing.iterdir()] == ["config.yaml"]
    assert (existing / "config.yaml").read_text(encoding="utf-8") == "mine\n"
