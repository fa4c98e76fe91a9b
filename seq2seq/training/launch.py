"""One run directory per launch, and Hydra's files written once, however many processes it starts.

Under ``torchrun`` or SLURM's ``srun`` every process runs ``train.py`` and so ``@hydra.main``
itself. Each would read the clock for ``runs/${now:...}``, and processes started a second apart
would pick different run directories; so the default run directory is named after the launch,
an id all its processes share (:func:`launch_id`). And each would write ``.hydra/`` and
``train.log`` there; so a process of rank > 0 writes no ``.hydra/`` and logs to
``train_rank<k>.log`` (:func:`with_rank_overrides`). Lightning's own launcher needs neither: it starts
its children with the parent's run directory, ``hydra.output_subdir=null`` and a log file of
their own (``lightning_fabric/strategies/launchers/subprocess_script.py``).

:func:`prepare_launch` is all ``train.py`` does before Hydra: these overrides, the recipe
(:mod:`seq2seq.training.recipe`), the checks of :mod:`seq2seq.training.overrides`, and the run
directory named and claimed (:mod:`seq2seq.training.ownership`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from omegaconf import OmegaConf

from seq2seq.config import ConfigError
from seq2seq.training.overrides import check_overrides, compose_run, hydra_args, insert_overrides
from seq2seq.training.ownership import RunLock, claim, fresh_directory, resumes
from seq2seq.training.recipe import choose_recipe

UNSET_RUN_ID = "none"  # torchrun's TORCHELASTIC_RUN_ID when its rendezvous got no --rdzv-id


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


# configs/train.yaml: runs/${launch_id:${now:...}}, the same directory for every process of a launch
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


def with_rank_overrides(argv: list[str], env: Mapping[str, str]) -> list[str]:
    """``argv`` plus, for a process of rank > 0, no ``.hydra/`` of its own and a log file of its own.

    They go where :func:`~seq2seq.training.overrides.insert_overrides` puts them, so an explicit
    ``hydra.job.name=...`` of the user's still wins.
    """
    rank = launched_rank(env)
    if rank == 0:
        return argv
    return insert_overrides(argv, ["hydra.output_subdir=null", f"hydra.job.name=train_rank{rank}"])


def names_directory(argv: list[str], key: str) -> bool:
    """Whether the command line sets ``key`` (``hydra.run.dir`` or ``hydra.sweep.dir``) itself."""
    return any(arg.lstrip("+").startswith(f"{key}=") for arg in argv)


def run_dir_conflict(argv: list[str], env: Mapping[str, str]) -> str | None:
    """Why the processes of this launch could write to different run directories, or None.

    Only torchrun with a static rendezvous and no ``--rdzv-id`` leaves its processes nothing to
    agree on; an explicit ``hydra.run.dir`` (or ``hydra.sweep.dir``) settles it.
    """
    explicit = names_directory(argv, "hydra.run.dir") or names_directory(argv, "hydra.sweep.dir")
    several = int(env.get("WORLD_SIZE", "1")) > 1
    if explicit or not several or "TORCHELASTIC_RUN_ID" not in env or launch_id(env) is not None:
        return None
    return (
        "torchrun without --rdzv-id: its processes would each name their own run directory; "
        "pass --rdzv-id=<name> (the same on every node) or hydra.run.dir=<dir>"
    )


class Launch(NamedTuple):
    """What ``train.py`` hands to Hydra."""

    argv: list[str]  # the command line Hydra parses: the user's, plus the recipe and this rank's overrides
    recipe: str  # the line that says which experiment runs and why
    claim: RunLock | None  # the run directory, held by this process until it exits; None for a sweep


def settle_run_directory(
    argv: list[str], overrides: list[str], env: Mapping[str, str], config_dir: Path
) -> tuple[list[str], RunLock | None]:
    """``argv`` naming the run (or sweep) directory that Hydra will create, and the claim on the run
    directory (:func:`~seq2seq.training.ownership.claim`), both before Hydra writes anything there.

    A default name, the time to the second, gets a suffix if another run has it; a name that the
    user or the launch (:func:`launch_id`) chose is kept, and refused if taken. The launch's rank 0
    claims; each job of a sweep claims its own directory when it starts.
    """
    multirun = hydra_args(argv).multirun
    key = f"hydra.{'sweep' if multirun else 'run'}.dir"
    cfg = compose_run(config_dir, overrides, with_hydra=True)
    directory = Path(OmegaConf.select(cfg, key))  # ${now:...} and ${launch_id:...} resolve here, once
    created = None
    if not names_directory(argv, key) and launch_id(env) is None:
        directory = created = fresh_directory(directory)
        argv = insert_overrides(argv, [f"{key}={directory}"])
    if multirun or not leads_launch(env):
        return argv, None
    run_dir = Path(cfg.output_dir) if cfg.output_dir else directory
    try:
        return argv, claim(run_dir, resumes(cfg.ckpt_path, run_dir), cfg.overwrite_output_dir)
    except ConfigError:
        if created is not None:
            with contextlib.suppress(OSError):
                created.rmdir()  # made above; removed while still empty
        raise


def prepare_launch(argv: list[str], env: Mapping[str, str], gpu: str | None, config_dir: Path) -> Launch:
    """``train.py``'s command line made ready for Hydra, or a one-line :class:`ConfigError`: the
    hardware's experiment added where none is named (``gpu``: the CUDA device's name, or None), the
    run directory and the overrides checked before Hydra creates anything, the run directory named
    and claimed, and this process's rank overrides added last."""
    with_recipe, recipe = choose_recipe(argv, gpu, config_dir)
    if conflict := run_dir_conflict(with_recipe, env):
        raise ConfigError(conflict)
    run_claim = None
    if (overrides := check_overrides(with_recipe, config_dir)) is not None:
        with_recipe, run_claim = settle_run_directory(with_recipe, overrides, env, config_dir)
    return Launch(with_rank_overrides(with_recipe, env), recipe, run_claim)
