"""A run directory belongs to one run: a second run into it stops at once naming the first, an
earlier run's files are written over only by its resume or when asked, default names never
collide, and bad trainer limits are refused before any directory exists."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from seq2seq.command_line import TERMINATED
from seq2seq.config import ConfigError, validated_run
from seq2seq.formats.run_directory import RunDirectory, RunDirectoryTaken, fresh_directory, holder
from seq2seq.launch.composing import compose_jobs, compose_run
from seq2seq.launch.plan import settle_directory
from seq2seq.launch.ranks import register_resolvers
from seq2seq.launch.start import start_run
from tests.helpers.compose import CONFIGS, ROOT, tiny_job
from tests.helpers.in_process import python

TINY = ("experiment=tiny", "trainer.max_epochs=1")


def train_py(cwd: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), *TINY, f"data.cache_dir={cwd / 'cache'}", *overrides]


def wait_for_text(path: Path, text: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (path.is_file() and text in path.read_text()):
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_second_run_stops_at_once_naming_the_first_which_sigterm_stops_resumably(tmp_path) -> None:
    run_dir = tmp_path / "run"
    first = subprocess.Popen(
        train_py(
            tmp_path,
            f"hydra.run.dir={run_dir}",
            "trainer.max_epochs=-1",  # only the SIGTERM ends it
            "callbacks.progress_every_n_steps=2",
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_text(run_dir / "train.log", "] - step 2 |", first)
        hydra_config = (run_dir / ".hydra" / "config.yaml").read_text()
        second = python(*train_py(tmp_path, f"hydra.run.dir={run_dir}", "seed=7", "optim.lr=0.01")[1:])
        assert first.poll() is None  # still training, undisturbed
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 1 and "step" not in second.stdout
    [line] = second.stderr.strip().splitlines()
    holder_is = rf"pid {first.pid} on {re.escape(socket.gethostname())}, started [\d-]{{10}} [\d:]{{8}}"
    assert re.fullmatch(
        rf"error: {re.escape(str(run_dir))} is in use by another run \({holder_is}\); "
        "wait for it to end or choose another directory",
        line,
    )
    assert (run_dir / ".hydra" / "config.yaml").read_text() == hydra_config  # the first run's, untouched
    assert first.returncode == TERMINATED, err[-2000:]
    assert "Traceback" not in err and "SIGTERM: saved a resumable checkpoint" in out
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] >= 2
    assert holder(run_dir) is None  # the lock went with the process


@pytest.mark.slow
def test_sigterm_to_the_whole_process_group_saves_a_resumable_checkpoint(tmp_path) -> None:
    """As ``timeout`` or a scheduler stops a job: the loader worker gets the signal too."""
    run_dir = tmp_path / "run"
    command = train_py(tmp_path, f"hydra.run.dir={run_dir}", "trainer.max_epochs=-1", "data.num_workers=1")
    run = subprocess.Popen(
        [*command, "callbacks.progress_every_n_steps=2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_text(run_dir / "train.log", "] - step 2 |", run)
        os.killpg(run.pid, signal.SIGTERM)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == TERMINATED, err[-2000:]
    assert "Traceback" not in err and "SIGTERM: saved a resumable checkpoint" in out
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] >= 2


def finished_run(directory: Path) -> list[str]:
    """A directory as a finished run leaves it (what matters: it has checkpoints); its listing."""
    (directory / "checkpoints").mkdir(parents=True)
    (directory / "checkpoints" / "best.ckpt").write_bytes(b"the earlier run's model")
    (directory / "config.yaml").write_text("seed: 1\n")
    return sorted(path.name for path in directory.rglob("*"))


def test_a_finished_runs_directory_is_refused_untouched(tmp_path) -> None:
    run_dir = tmp_path / "run"
    listing = finished_run(run_dir)
    with pytest.raises(RunDirectoryTaken) as refused:
        start_run(tiny_job(run_dir, tmp_path / "cache"))
    assert str(refused.value) == (
        f"{run_dir} holds an earlier run (checkpoints): resume it with "
        f"ckpt_path={run_dir}/checkpoints/last.ckpt, choose another directory, "
        "or pass overwrite_output_dir=true to write over it"
    )
    assert sorted(path.name for path in run_dir.rglob("*")) == listing  # not even a lock file


def test_train_py_claims_the_directory_before_hydra_writes_there(tmp_path) -> None:
    """``train.py`` claims the run directory before Hydra creates it and writes ``.hydra/`` and
    ``train.log``: a finished run's directory is refused without a file of the new run in it."""
    run_dir = tmp_path / "run"
    listing = finished_run(run_dir)
    result = python(*train_py(tmp_path, f"hydra.run.dir={run_dir}")[1:])
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {run_dir} holds an earlier run (checkpoints): resume it with "
        f"ckpt_path={run_dir}/checkpoints/last.ckpt, choose another directory, "
        "or pass overwrite_output_dir=true to write over it"
    ]
    assert sorted(path.name for path in run_dir.rglob("*")) == listing


def test_its_resume_or_overwrite_output_dir_may_write_there(tmp_path) -> None:
    run_dir = tmp_path / "run"
    finished_run(run_dir)
    checkpoint = run_dir / "checkpoints" / "best.ckpt"
    RunDirectory.claim(run_dir, resumes=True, overwrite=False).release()
    RunDirectory.claim(run_dir, resumes=False, overwrite=True).release()
    with pytest.raises(RunDirectoryTaken, match="holds an earlier run"):
        RunDirectory.claim(run_dir, resumes=False, overwrite=False)
    assert checkpoint.read_bytes() == b"the earlier run's model"


def test_a_held_directory_names_its_holder_and_is_free_once_released(tmp_path) -> None:
    lock = RunDirectory.claim(tmp_path / "run", resumes=False, overwrite=False)
    started = time.strftime("%Y-%m-%d %H:%M")
    who = holder(tmp_path / "run")
    assert who is not None and who.startswith(f"pid {os.getpid()} on {socket.gethostname()}, started ")
    assert who.endswith(tuple(f"{started}:{second:02d}" for second in range(60)))
    with pytest.raises(RunDirectoryTaken, match=re.escape(f"is in use by another run ({who})")):
        RunDirectory.claim(tmp_path / "run", resumes=False, overwrite=False)  # as another run would try it
    lock.release()
    assert holder(tmp_path / "run") is None
    RunDirectory.claim(
        tmp_path / "run", resumes=False, overwrite=False
    ).release()  # start-up files only: free


def test_runs_asking_for_one_default_name_at_once_each_get_their_own(tmp_path) -> None:
    base, names = tmp_path / "runs" / "2030-01-01_00-00-00", []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        names.append(fresh_directory(base)[0].name)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(names) == [base.name, *(f"{base.name}-{k}" for k in range(1, 8))]


def test_a_default_name_that_is_taken_gets_a_suffix_and_a_chosen_one_does_not(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    now = time.time()
    for second in range(-1, 30):  # whichever second the config's ${now:...} reads
        (tmp_path / "runs" / time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now + second))).mkdir(
            parents=True, exist_ok=True
        )
    register_resolvers()  # as train.py does: the default name is runs/${launch_id:${now:...}}
    [job] = compose_jobs(CONFIGS, [["experiment=tiny"]], validate=True)  # as train.py plans it
    ours, job, run_dir = settle_directory(job, multirun=False, env={})
    try:
        [named] = ours  # what Hydra is told: where it writes .hydra/ and the log
        assert re.fullmatch(r"hydra\.run\.dir=runs/\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d-1", named)
        assert run_dir.path == Path(named.split("=", 1)[1]) and holder(run_dir.path) is not None
        assert job.config.hydra.run.dir == job.run.output_dir == str(run_dir.path)
        assert job.config.hydra.overrides.hydra[0] == named
    finally:
        run_dir.release()
    chosen = ["experiment=tiny", f"hydra.run.dir={tmp_path / 'mine'}"]
    ours, _, run_dir = settle_directory(compose_jobs(CONFIGS, [chosen], validate=True)[0], False, env={})
    run_dir.release()
    assert ours == [] and run_dir.path == tmp_path / "mine"


@pytest.mark.parametrize("limit", ["max_epochs", "max_steps"])
@pytest.mark.parametrize("value", [-5, 0])
def test_trainer_limits_below_one_are_refused_and_minus_one_means_none(limit, value) -> None:
    """0 would train nothing and leave no checkpoint, which every completed run leaves."""
    message = rf"^trainer\.{limit} must be >= 1, or -1 for no limit, got {value}$"
    with pytest.raises(ConfigError, match=message):
        validated_run(compose_run(CONFIGS, ["experiment=tiny", f"trainer.{limit}={value}"]))
    validated_run(compose_run(CONFIGS, ["experiment=tiny", f"trainer.{limit}=-1"]))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.max_epochs=-5", "trainer.max_epochs must be >= 1, or -1 for no limit, got -5"),
        ("trainer.max_steps=0", "trainer.max_steps must be >= 1, or -1 for no limit, got 0"),
        ("optim.lr=nan", "optim.lr must be a finite number, got nan"),
    ],
)
def test_a_bad_value_is_one_line_before_any_run_directory(tmp_path, override, message) -> None:
    result = python(*train_py(tmp_path, override)[1:], cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: {message}"]
    assert not (tmp_path / "runs").exists()
