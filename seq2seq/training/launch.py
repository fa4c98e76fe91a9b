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
(:mod:`seq2seq.training.recipe`) and the checks of :mod:`seq2seq.training.overrides`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from seq2seq.config import ConfigError
from seq2seq.training.overrides import check_overrides, insert_overrides
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


def launched_rank(env: Mapping[str, str]) -> int:
    """This process's global rank as torchrun (RANK) or srun (SLURM_PROCID) set it; 0 if neither did."""
    return int(env.get("RANK", env.get("SLURM_PROCID", "0")))


def with_rank_overrides(argv: list[str], env: Mapping[str, str]) -> list[str]:
    """``argv`` plus, for a process of rank > 0, no ``.hydra/`` of its own and a log file of its own.

    They go where :func:`~seq2seq.training.overrides.insert_overrides` puts them, so an explicit
    ``hydra.job.name=...`` of the user's still wins.
    """
    rank = launched_rank(env)
    if rank == 0:
        return argv
    return insert_overrides(argv, ["hydra.output_subdir=null", f"hydra.job.name=train_rank{rank}"])


def run_dir_conflict(argv: list[str], env: Mapping[str, str]) -> str | None:
    """Why the processes of this launch could write to different run directories, or None.

    Only torchrun with a static rendezvous and no ``--rdzv-id`` leaves its processes nothing to
    agree on; an explicit ``hydra.run.dir`` (or ``hydra.sweep.dir``) settles it.
    """
    explicit = any(arg.lstrip("+").startswith(("hydra.run.dir=", "hydra.sweep.dir=")) for arg in argv)
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


def prepare_launch(argv: list[str], env: Mapping[str, str], gpu: str | None, config_dir: Path) -> Launch:
    """``train.py``'s command line made ready for Hydra, or a one-line :class:`ConfigError`: the
    hardware's experiment added where none is named (``gpu``: the CUDA device's name, or None), the
    run directory and the overrides checked before Hydra creates anything, and this process's rank
    overrides added last."""
    with_recipe, recipe = choose_recipe(argv, gpu, config_dir)
    if conflict := run_dir_conflict(with_recipe, env):
        raise ConfigError(conflict)
    check_overrides(with_recipe, config_dir)
    return Launch(with_rank_overrides(with_recipe, env), recipe)
