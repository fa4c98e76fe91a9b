"""How a launch of ``train.py`` starts: the recipe and one-line errors before Hydra
(:func:`prepare_launch`), then, once Hydra has composed the config, the run directory named and
claimed before Hydra writes into it (:class:`RunStart`). Under torchrun or srun, where every
process runs ``train.py``, they all agree on one run directory and only rank 0 writes Hydra's files
(docs/distributed.md, Launchers).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from hydra import compose
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write

from seq2seq.config import ConfigError, validated_run
from seq2seq.training.init_from import model_overrides
from seq2seq.training.overrides import check_overrides, hydra_args, insert_overrides, job_overrides
from seq2seq.training.ownership import RunLock, claim, discard_unstarted_run, fresh_directory, resumes
from seq2seq.training.recipe import choose_recipe
from seq2seq.training.requeue import requeued_checkpoint

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


def names_directory(overrides: list[str], key: str) -> bool:
    """Whether the overrides set ``key`` (``hydra.run.dir`` or ``hydra.sweep.dir``) themselves."""
    return any(arg.lstrip("+").startswith(f"{key}=") for arg in overrides)


def run_dir_conflict(overrides: list[str], env: Mapping[str, str]) -> str | None:
    """Why the processes of this launch could write to different run directories, or None.

    Only torchrun with a static rendezvous and no ``--rdzv-id`` leaves its processes nothing to
    agree on; an explicit ``hydra.run.dir`` (or ``hydra.sweep.dir``) settles it.
    """
    explicit = names_directory(overrides, RUN_DIR) or names_directory(overrides, SWEEP_DIR)
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
    hardware's experiment added where none is named (``gpu``: the CUDA device's name, or None),
    with ``init_from`` the checkpoint's model keys, the overrides composed once to find a bad key or
    option, and this process's rank overrides."""
    with_recipe, recipe = choose_recipe(argv, gpu, config_dir)
    model, start = model_overrides(hydra_args(argv).overrides)
    if model:
        with_recipe = insert_overrides(with_recipe, model)
        recipe += f"; the model keys from init_from={start}, where the command line sets none"
    check_overrides(with_recipe, config_dir)
    return Launch(with_rank_overrides(with_recipe, env), recipe)


def settle_run_directory(config: DictConfig, key: str, env: Mapping[str, str]) -> RunLock | None:
    """Name the directory at ``key`` (:data:`RUN_DIR`, or :data:`SWEEP_DIR` for a sweep) in Hydra's
    composed ``config``, and claim the run directory (:func:`~seq2seq.training.ownership.claim`),
    both before Hydra creates it or writes there.

    A default name, the time to the second, gets a suffix if another run has it; a name that the
    user or the launch (:func:`launch_id`) chose is kept, and refused if taken, unless a requeued
    SLURM job finds its own there: then it resumes from its ``last.ckpt``. The launch's rank 0
    claims, and the claim is returned; each job of a sweep claims its own directory when it starts.
    """
    given = [*config.hydra.overrides.hydra, *config.hydra.overrides.task]
    if conflict := run_dir_conflict(given, env):
        raise ConfigError(conflict)
    directory = Path(OmegaConf.select(config, key))  # ${now:...} and ${launch_id:...} resolve here, once
    fresh = not names_directory(given, key) and launch_id(env) is None
    if fresh:
        directory = fresh_directory(directory)
        with read_write(config.hydra):
            OmegaConf.update(config, key, str(directory))
            config.hydra.overrides.hydra.append(f"{key}={directory}")  # each job of a sweep is composed so
    run_dir = Path(config.output_dir) if config.output_dir else directory
    if key == RUN_DIR and (last := requeued_checkpoint(run_dir, launch_id(env), env)) is not None:
        with read_write(config):  # every rank resumes, from the checkpoint the job's last run saved
            config.ckpt_path = str(last)
    if key == SWEEP_DIR or not leads_launch(env):
        return None
    try:
        return claim(run_dir, resumes(config.ckpt_path, run_dir), config.overwrite_output_dir)
    except ConfigError:
        if fresh:
            discard_unstarted_run(directory)
        raise


def check_sweep(overrides: list[str], compose_job: Callable[[list[str]], DictConfig]) -> None:
    """Raise :class:`ConfigError` in one line if a value of a sweep breaks a rule of
    ``seq2seq/config.py``: each value checked before the first job trains, where that job's own
    validation would stop the sweep midway. ``compose_job`` composes one job's config."""
    for job in job_overrides(overrides, multirun=True):
        validated_run(compose_job(job))


@contextmanager
def one_line_errors() -> Iterator[None]:
    """A :class:`ConfigError` ends the process with one line, as ``train.py`` reports it: raised
    from a callback, Hydra would print a traceback."""
    try:
        yield
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None


class RunStart(Callback):
    """Runs after Hydra composes the config and before it creates the run's directory and writes
    ``.hydra/`` and the log there (registered in configs/train.yaml, ``hydra.callbacks``)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        with one_line_errors():
            settle_run_directory(config, RUN_DIR, os.environ)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        with one_line_errors():
            task = list(config.hydra.overrides.task)
            check_sweep(task, lambda job: compose(config.hydra.job.config_name, overrides=job))
            settle_run_directory(config, SWEEP_DIR, os.environ)
