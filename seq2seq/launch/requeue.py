"""Where a requeued SLURM job starts: from its run directory's ``last.ckpt``, or over, where its
predecessor saved no checkpoint (:class:`~seq2seq.training.requeue.RequeueOnSignal` requeues it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from seq2seq.config import ConfigError


def requeued(run_dir: Path, launch_name: str | None, env: Mapping[str, str]) -> bool:
    """Whether this is a requeued SLURM job (SLURM_RESTART_COUNT > 0) and ``run_dir`` is the one
    named after it (``launch_name``, the same job id)."""
    count = env.get("SLURM_RESTART_COUNT", "0")
    if not count.strip().isdigit():
        raise ConfigError(f"SLURM_RESTART_COUNT must be a whole number >= 0, got {count!r}")
    return int(count) > 0 and run_dir.name == launch_name


def requeued_checkpoint(run_dir: Path, launch_name: str | None, env: Mapping[str, str]) -> Path | None:
    """``run_dir``'s ``checkpoints/last.ckpt`` if this is a requeued job in its own directory
    (:func:`requeued`); else None."""
    last = run_dir / "checkpoints" / "last.ckpt"
    return last if requeued(run_dir, launch_name, env) and last.is_file() else None


def starts_over(run_dir: Path, launch_name: str | None, env: Mapping[str, str]) -> bool:
    """Whether this requeued job's predecessor was stopped before it saved any checkpoint: the
    job then trains from the start over what it left (logs, tensorboard), as nothing can resume."""
    return requeued(run_dir, launch_name, env) and not any((run_dir / "checkpoints").glob("*.ckpt"))
