"""A SLURM job that reaches its time limit or is preempted continues by itself: SLURM's warning
signal requeues the job (:class:`RequeueOnSignal`), and the requeued job resumes from its run
directory's ``last.ckpt`` (:mod:`seq2seq.launch.requeue` decides). docs/distributed.md, "Preemption
and time limits", says what ``slurm/train.sbatch`` asks for."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping
from types import FrameType

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


class RequeueOnSignal:
    """On SLURM's warning signal, global rank 0 requeues the job with ``scontrol requeue``.

    Armed for the whole run (:meth:`armed`), data preparation included, not only once the trainer
    runs. SLURM then ends the running job with SIGTERM: in training every rank stops at the next
    batch, :class:`~seq2seq.training.checkpointing.SaveLast` saves ``last.ckpt`` and the process
    exits; before it, the process ends and the requeued job starts over
    (:func:`seq2seq.launch.requeue.starts_over`). If
    ``scontrol`` fails, the run goes on to its time limit.
    """

    def __init__(self, global_rank: int) -> None:
        self.job = slurm_job(os.environ) if SLURMEnvironment.detect() else None  # an srun task's job
        self._requeuer = os.getpid() if global_rank == 0 else None  # not a loader worker forked later

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """The handler installed on every rank (the signal's default action kills), then the previous one."""
        if self.job is None or threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(REQUEUE_SIGNAL, self._requeue)
        try:
            yield
        finally:
            signal.signal(REQUEUE_SIGNAL, previous)

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
