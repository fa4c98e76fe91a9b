"""A SLURM job continues by itself: SLURM's warning signal requeues it, and the requeued job resumes
from its run directory's last.ckpt. SLURM is faked: its variables, and an ``scontrol`` that records
its arguments and, as SLURM does on a requeue, ends the job with SIGTERM."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from seq2seq.command_line import TERMINATED
from seq2seq.config import ConfigError
from seq2seq.launch import start
from seq2seq.launch.composing import compose_jobs
from seq2seq.launch.plan import settle_directory
from seq2seq.launch.ranks import register_resolvers
from seq2seq.launch.requeue import requeued_checkpoint, starts_over
from seq2seq.training.requeue import REQUEUE_SIGNAL
from tests.helpers.compose import CONFIGS, ROOT

JOB = "4242"
FAKE_SCONTROL = """#!/bin/sh
echo "$@" >> "{calls}"
kill -TERM "$PPID"
"""


def slurm_env(tmp_path: Path, restarts: int) -> dict[str, str]:
    """One srun task of job :data:`JOB`, step 0, as Lightning's SLURMEnvironment reads it."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.is_dir():
        bin_dir.mkdir()
        scontrol = bin_dir / "scontrol"
        scontrol.write_text(FAKE_SCONTROL.format(calls=tmp_path / "scontrol-calls"))
        scontrol.chmod(0o755)
    env = {name: value for name, value in os.environ.items() if not name.startswith("SLURM_")}
    return {
        **env,
        "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}",
        "SLURM_JOB_ID": JOB,
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_NAME": "seq2seq",  # not "bash" or "interactive": Lightning takes those for no job
        "SLURM_NTASKS": "1",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NNODES": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "localhost",
        "SLURM_RESTART_COUNT": str(restarts),
    }


def wait_for_new_text(path: Path, earlier: str, text: str, process: subprocess.Popen) -> None:
    """Wait for ``text`` in ``path`` after what it held before (``earlier``): the log is appended to."""
    deadline = time.monotonic() + 120
    while not (path.is_file() and text in path.read_text().removeprefix(earlier)):
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.05)


def train_until_warned(tmp_path: Path, restarts: int) -> list[int]:
    """The same command each time, as the requeued batch script runs it: train until the first
    progress line, send the warning signal; returns the steps of this run's progress lines."""
    log = tmp_path / "runs" / f"slurm-{JOB}.0" / "train.log"
    logged = log.read_text() if log.is_file() else ""
    run = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "experiment=tiny",
            "trainer.max_epochs=-1",  # only SLURM ends it
            "callbacks.progress_every_n_steps=2",
            f"data.path={ROOT / 'tests' / 'fixtures' / 'tiny.tsv'}",
            f"data.cache_dir={tmp_path / 'cache'}",
        ],
        cwd=tmp_path,  # the run directory is runs/slurm-<job>.<step> under it
        env=slurm_env(tmp_path, restarts),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_new_text(log, logged, "] - step", run)
        run.send_signal(REQUEUE_SIGNAL)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == TERMINATED, err[-2000:]
    assert "Traceback" not in err and "SIGTERM: saved a resumable checkpoint" in out
    return [int(step) for step in re.findall(r"\] - step (\d+) \|", log.read_text().removeprefix(logged))]


@pytest.mark.slow
def test_the_warning_signal_requeues_the_job_and_the_requeued_job_resumes_its_run(tmp_path) -> None:
    run_dir = tmp_path / "runs" / f"slurm-{JOB}.0"
    last = run_dir / "checkpoints" / "last.ckpt"
    first_steps = train_until_warned(tmp_path, restarts=0)
    first_stop = torch.load(last, weights_only=True)["global_step"]
    assert (tmp_path / "scontrol-calls").read_text() == f"requeue {JOB}\n"
    assert first_steps[0] == 2 and first_stop >= first_steps[-1]

    second_steps = train_until_warned(tmp_path, restarts=1)  # the same command, requeued
    assert f"ckpt_path: {last.relative_to(tmp_path)}\n" in (run_dir / "config.yaml").read_text()
    assert second_steps[0] > first_stop  # it went on from where the first stopped, not from 0
    assert torch.load(last, weights_only=True)["global_step"] > first_stop
    assert (tmp_path / "scontrol-calls").read_text() == f"requeue {JOB}\n" * 2
    assert [path.name for path in (tmp_path / "runs").iterdir()] == [run_dir.name]


def test_only_a_requeued_job_resumes_and_only_in_the_directory_named_after_it(tmp_path) -> None:
    env = {"SLURM_JOB_ID": JOB, "SLURM_STEP_ID": "0", "SLURM_RESTART_COUNT": "1"}
    own = tmp_path / f"slurm-{JOB}.0"
    (own / "checkpoints").mkdir(parents=True)
    assert requeued_checkpoint(own, own.name, env) is None  # no last.ckpt: nothing to resume
    (own / "checkpoints" / "last.ckpt").write_bytes(b"a checkpoint")
    assert requeued_checkpoint(own, own.name, env) == own / "checkpoints" / "last.ckpt"
    assert requeued_checkpoint(own, own.name, {**env, "SLURM_RESTART_COUNT": "0"}) is None  # first start
    assert requeued_checkpoint(own, "slurm-7.0", env) is None  # another job's directory
    assert requeued_checkpoint(own, None, env) is None  # not an srun step


def test_a_requeued_job_whose_predecessor_saved_nothing_starts_over(tmp_path, monkeypatch) -> None:
    """Preempted before its first checkpoint: the directory holds logs but nothing to resume."""
    env = slurm_env(tmp_path, restarts=1)
    own = tmp_path / "runs" / f"slurm-{JOB}.0"
    (own / "tensorboard").mkdir(parents=True)
    assert starts_over(own, own.name, env)
    assert not starts_over(own, own.name, {**env, "SLURM_RESTART_COUNT": "0"})  # a first start is refused
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():  # the run directory's name resolves from the environment
        monkeypatch.setenv(name, value)
    register_resolvers()
    [job] = compose_jobs(CONFIGS, [["experiment=tiny"]], validate=True)
    ours, _, run_dir = settle_directory(job, False, env)
    run_dir.release()
    assert run_dir.path == Path("runs") / own.name and not any("ckpt_path" in o for o in ours)
    (own / "checkpoints").mkdir()
    (own / "checkpoints" / "best.ckpt").write_bytes(b"a checkpoint")
    assert not starts_over(own, own.name, env)  # a checkpoint to keep: never written over unasked


@pytest.mark.parametrize("count", ["one", "-1", ""])
def test_a_malformed_restart_count_is_one_line(tmp_path, count: str) -> None:
    env = {"SLURM_RESTART_COUNT": count}
    with pytest.raises(
        ConfigError, match=rf"^SLURM_RESTART_COUNT must be a whole number >= 0, got '{count}'$"
    ):
        requeued_checkpoint(tmp_path, tmp_path.name, env)


def test_the_warning_signal_requeues_from_the_start_of_the_run(tmp_path, monkeypatch) -> None:
    """A warning while the data is prepared, before the trainer exists, requeues the job too."""
    for name, value in slurm_env(tmp_path, restarts=0).items():
        monkeypatch.setenv(name, value)
    calls = tmp_path / "scontrol-calls"
    (tmp_path / "bin" / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')  # records only

    def preparing_data(run, claimed):
        os.kill(os.getpid(), REQUEUE_SIGNAL)  # the handler runs here, before this returns
        return {}

    monkeypatch.setattr(start, "start_run", preparing_data)
    start.run_job(compose_jobs(CONFIGS, [["experiment=tiny"]], validate=True)[0].run, None, "recipe")
    assert calls.read_text() == f"requeue {JOB}\n"


def test_the_batch_script_asks_for_the_signal_that_requeues_and_to_be_requeued() -> None:
    script = (ROOT / "slurm" / "train.sbatch").read_text()
    assert f"#SBATCH --signal={REQUEUE_SIGNAL.name.removeprefix('SIG')}@" in script
    assert "#SBATCH --requeue" in script
