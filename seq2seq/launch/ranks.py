"""The processes of one launch: under torchrun or srun every process runs ``train.py``; they agree
on one run directory (:func:`launch_id`), rank 0 claims it and writes Hydra's files there, and the
others log to files of their own (docs/distributed.md, Launchers)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from omegaconf import OmegaConf

from seq2seq.launch.command_line import names_key

UNSET_RUN_ID = "none"  # torchrun's TORCHELASTIC_RUN_ID when its rendezvous got no --rdzv-id
RUN_DIR, SWEEP_DIR = "hydra.run.dir", "hydra.sweep.dir"  # where Hydra creates a run's or a sweep's directory


def launch_id(env: Mapping[str, str]) -> str | None:
    """The name every process of this launch agrees on, or None for a process started alone.

    srun: the job and step (each ``srun`` of a job is a new step). torchrun: the rendezvous id,
    a fresh UUID with ``--standalone`` or on one node without ``--master-port``, ``--rdzv-id``
    otherwise. SLURM comes first, so that one torchrun per node started by srun agrees too.
    """
    if "SLURM_JOB_ID" in env and "SLURM_STEP_ID" in env:
        return f"slurm-{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"
    run_id = env.get("TORCHELASTIC_RUN_ID", UNSET_RUN_ID)
    return None if run_id == UNSET_RUN_ID else f"torchrun-{run_id}"


def register_resolvers() -> None:
    """``${launch_id:fallback}``, which configs/train.yaml's run and sweep directories use: the
    launch's id under srun or torchrun (the same in every process), else ``fallback`` (the time)."""
    if not OmegaConf.has_resolver("launch_id"):
        OmegaConf.register_new_resolver(
            "launch_id", lambda fallback: launch_id(os.environ) or fallback, use_cache=True
        )


def launched_rank(env: Mapping[str, str]) -> int:
    """This process's global rank as torchrun (RANK) or srun (SLURM_PROCID) set it; 0 if neither did."""
    return int(env.get("RANK", env.get("SLURM_PROCID", "0")))


def leads_launch(env: Mapping[str, str]) -> bool:
    """Whether this process is its launch's rank 0, the one that claims the run directory: not
    another rank of torchrun or srun, another node, or a child of Lightning's launcher (LOCAL_RANK)."""
    return launched_rank(env) == 0 and all(env.get(name, "0") == "0" for name in ("LOCAL_RANK", "NODE_RANK"))


def rank_overrides(env: Mapping[str, str]) -> list[str]:
    """What Hydra is told for a process of rank > 0: no ``.hydra/`` of its own and a log file of its
    own. They go before the command line's overrides, so an explicit ``hydra.job.name=...`` wins."""
    rank = launched_rank(env)
    return [] if rank == 0 else ["hydra.output_subdir=null", f"hydra.job.name=train_rank{rank}"]


def run_dir_conflict(overrides: list[str], env: Mapping[str, str]) -> str | None:
    """Why the processes of this launch could write to different run directories, or None.

    Only torchrun with a static rendezvous and no ``--rdzv-id`` leaves its processes nothing to
    agree on; an explicit ``hydra.run.dir`` (or ``hydra.sweep.dir``) settles it.
    """
    explicit = names_key(overrides, RUN_DIR) or names_key(overrides, SWEEP_DIR)
    several = int(env.get("WORLD_SIZE", "1")) > 1
    if explicit or not several or "TORCHELASTIC_RUN_ID" not in env or launch_id(env) is not None:
        return None
    return (
        "torchrun without --rdzv-id: its processes would each name their own run directory; "
        "pass --rdzv-id=<name> (the same on every node) or hydra.run.dir=<dir>"
    )
