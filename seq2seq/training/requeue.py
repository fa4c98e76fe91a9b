"""A SLURM job that reaches its time limit or is preempted continues by itself: SLURM's warning
signal requeues the job (:class:`RequeueOnSignal`), and the requeued job resumes from its run
directory's ``last.ckpt`` (:func:`requeued_checkpoint`). docs/distributed.md, "Preemption and time
limits", says what ``slurm/train.sbatch`` asks for."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import pytorch_lightning as pl
from lightning_fabric.plugins.environments import SLURMEnvironment

log = logging.getLogger(__name__)

REQUEUE_SIGNAL = signal.SIGUSR1  # slurm/train.sbatch: --signal=USR1@90


def slurm_environment() -> list[SLURMEnvironment]:
    """Lightning's SLURM plugin without its own requeue, when this process is an srun task.

    Its handler saves a checkpoint of its own (``hpc_ckpt_<n>.ckpt``) inside the signal handler,
    mid-batch, with a barrier under DDP; :class:`RequeueOnSignal` leaves the saving to SIGTERM.
    """
    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


def slurm_job(env: Mapping[str, str]) -> str | None:
    """The id ``scontrol requeue`` takes: ``<array job>_<task>`` for an array task, else the job's."""
    if "SLURM_ARRAY_JOB_ID" in env:
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID")


def requeued_checkpoint(run_dir: Path, launch_name: str | None, env: Mapping[str, str]) -> Path | None:
    """``run_dir``'s ``checkpoints/last.ckpt`` if this is a requeued SLURM job (SLURM_RESTART_COUNT
    > 0) and ``run_dir`` is the one named after it (``launch_name``, the same job id); else None."""
    if int(env.get("SLURM_RESTART_COUNT", "0")) == 0 or run_dir.name != launch_name:
        return None
    last = run_dir / "checkpoints" / "last.ckpt"
    return last if last.is_file() else None


class RequeueOnSignal(pl.Callback):
    """On SLURM's warning signal, global rank 0 requeues the job with ``scontrol requeue``.

    SLURM then ends the running job with SIGTERM, on which every rank stops at the next batch,
    :class:`~seq2seq.training.checkpointing.SaveLast` saves ``last.ckpt`` and the process exits; the
    requeued job resumes there. If ``scontrol`` fails, the run goes on to its time limit.
    """

    def __init__(self) -> None:
        self.job = slurm_job(os.environ) if SLURMEnvironment.detect() else None  # an srun task's job
        self._requeuer: int | None = None  # the pid that requeues: global rank 0's training process
        self._previous: Any = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.job is not None and threading.current_thread() is threading.main_thread():
            self._requeuer = os.getpid() if trainer.is_global_zero else None
            self._previous = signal.signal(REQUEUE_SIGNAL, self._requeue)  # on every rank: its default kills

    def _requeue(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._requeuer:  # another rank, or a loader worker forked with this handler
            return
        log.warning("%s: requeueing SLURM job %s", signal.Signals(signum).name, self.job)
        try:
            done = subprocess.run(["scontrol", "requeue", str(self.job)], capture_output=True, text=True)
        except OSError as err:
            log.warning("scontrol requeue failed: %s", err)
            return
        if done.returncode != 0:
            log.warning("scontrol requeue failed (%d): %s", done.returncode, done.stderr.strip())

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._previous is not None:
            signal.signal(REQUEUE_SIGNAL, self._previous)
            self._previous = None
