"""A launch planned once: ``train.py``'s command line and environment turned into what Hydra is told,
each job composed and validated once, and a run's directory named and claimed, before anything is
written (a mistake costs one line and no directory).

A sweep with Hydra's basic sweeper and launcher (the defaults) is planned whole: its own config and
every job, for :func:`~seq2seq.launch.with_hydra.run_sweep`. A sweeper or launcher plugin (Optuna,
joblib, submitit) chooses or composes its jobs itself, so its sweep goes through Hydra's
``multirun``, each value checked here first."""

from __future__ import annotations

import argparse
import copy
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from seq2seq.config import ConfigError
from seq2seq.formats.run_directory import RunDirectory, fresh_directory, resumes
from seq2seq.launch.command_line import for_hydra_alone, hydra_args, job_overrides, names_key
from seq2seq.launch.composing import Composed, compose_jobs, compose_sweep, grid
from seq2seq.launch.init_from import model_overrides
from seq2seq.launch.ranks import (
    RUN_DIR,
    SWEEP_DIR,
    launch_id,
    leads_launch,
    rank_overrides,
    register_resolvers,
    run_dir_conflict,
)
from seq2seq.launch.recipe import choose_recipe
from seq2seq.launch.requeue import requeued_checkpoint, starts_over

RUN_MODE = "hydra.mode=RUN"  # what @hydra.main adds for a run, so .hydra/hydra.yaml records it too
MULTIRUN_MODE = "hydra.mode=MULTIRUN"  # and for a sweep, last: it wins over a hydra.mode given
BASIC = (  # Hydra's own sweeper and launcher, the defaults, as hydra.sweeper and hydra.launcher name them
    "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
    "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
)


class Sweep(NamedTuple):
    """A sweep with Hydra's basic sweeper and launcher, composed and validated before it starts."""

    config: DictConfig  # its own config, with Hydra's node: what multirun.yaml holds
    jobs: list[Composed]  # each job in the order Hydra's basic sweeper lists them


class Plan(NamedTuple):
    """What ``python train.py ...`` does, decided before anything is written."""

    args: argparse.Namespace  # the command line's flags, read as Hydra reads them
    overrides: list[str]  # what Hydra is told: ours (rank, init_from's keys, the recipe), then the user's
    recipe: str  # the line that says which experiment runs and why; empty where Hydra alone answers
    job: Composed | None = None  # a single run: its config and its run (output_dir: its directory)
    run_dir: RunDirectory | None = None  # that run's directory, claimed by the launch's rank 0
    sweep: Sweep | None = None  # a sweep that train.py runs itself


def plan_launch(argv: list[str], env: Mapping[str, str], gpu: str | None, config_dir: Path) -> Plan:
    """``train.py``'s plan, or a one-line :class:`ConfigError` (``gpu``: the CUDA device's name, or
    None). A single run is composed and validated here, once, and its directory claimed by the
    launch's rank 0; a sweep is planned by :func:`plan_sweep`; ``--cfg`` and ``--info`` have their
    keys checked. The line of what Hydra answers alone (its help, another config) is left as typed."""
    register_resolvers()
    args = hydra_args(argv)
    if for_hydra_alone(args):
        return Plan(args, args.overrides, "")
    overrides, recipe = choose_recipe(args.overrides, gpu, config_dir)
    keys, start = model_overrides(args.overrides)
    if keys:
        kinds = "model and tokenizer" if any(key.startswith("model.") for key in keys) else "tokenizer"
        recipe += f"; the {kinds} keys from init_from={start}, where the command line sets none"
    plan = Plan(args, [*rank_overrides(env), *keys, *overrides], recipe)
    if args.multirun:  # never with --cfg or --info: Hydra answers those alone
        return plan_sweep(plan, config_dir, env)
    trains = args.cfg is None and args.info is None
    given_mode = names_key(plan.overrides, "hydra.mode")
    told = [*plan.overrides, RUN_MODE] if trains and not given_mode else plan.overrides
    [job] = compose_jobs(config_dir, [told], validate=trains)
    if not trains:
        return plan
    _, job, run_dir = settle_directory(job, False, env)
    return plan._replace(job=job, run_dir=run_dir)


def plan_sweep(plan: Plan, config_dir: Path, env: Mapping[str, str]) -> Plan:
    """A sweep's plan: its own config composed, its directory named, what Hydra is told; with Hydra's
    basic sweeper and launcher every job composed and validated once (in its sweep directory,
    resolving ``${now:...}`` as the sweep did, as Hydra's launcher does); with a plugin, each
    value validated once and the jobs left to Hydra's ``multirun``."""
    given = [*plan.overrides, MULTIRUN_MODE]
    config = compose_sweep(config_dir, given)
    basic = (config.hydra.sweeper._target_, config.hydra.launcher._target_) == BASIC
    if basic:
        jobs = compose_jobs(config_dir, grid(config_dir, config), validate=True)
    else:
        compose_jobs(config_dir, job_overrides(plan.overrides, multirun=True), validate=True)
    ours, _, _ = settle_directory(Composed(config, None), True, env)
    plan = plan._replace(overrides=[*ours, *given])
    if not basic:
        return plan
    sweep = Sweep(told(config, ours), [job._replace(config=told(job.config, ours)) for job in jobs])
    for job in sweep.jobs:
        OmegaConf.copy_cache(from_config=config, to_config=job.config)
    return plan._replace(sweep=sweep)


def settle_directory(
    job: Composed, multirun: bool, env: Mapping[str, str]
) -> tuple[list[str], Composed, RunDirectory | None]:
    """The overrides that name a run's (or a sweep's) directory before anything is created there, the
    run told them (its ``output_dir`` set to the directory), and the directory, claimed by the
    launch's rank 0.

    A default name, the time to the second, gets a suffix if another run has it; a name that the
    user or the launch (:func:`launch_id`) chose is kept, and refused if taken, unless a requeued
    SLURM job finds its own there: then it resumes from its ``last.ckpt``, or starts over where its
    predecessor saved no checkpoint. Each job of a sweep claims its own directory when it starts.
    """
    config = job.config
    given = [*config.hydra.overrides.hydra, *config.hydra.overrides.task]
    if conflict := run_dir_conflict(given, env):
        raise ConfigError(conflict)
    key = SWEEP_DIR if multirun else RUN_DIR
    directory = Path(OmegaConf.select(config, key))  # ${now:...} and ${launch_id:...} resolve here, once
    made: set[Path] = set()
    if not names_key(given, key) and launch_id(env) is None:
        directory, made = fresh_directory(directory)
    ours = [] if names_key(given, key) else [f"{key}={directory}"]
    if multirun or job.run is None:
        return ours, job, None
    run = job.run
    path = Path(run.output_dir) if run.output_dir else directory
    overwrite = run.overwrite_output_dir
    if (last := requeued_checkpoint(path, launch_id(env), env)) is not None:  # every rank resumes
        ours.append(f"ckpt_path={last}")
        run = replace(run, ckpt_path=str(last))
    elif starts_over(path, launch_id(env), env):
        overwrite = True
    job = Composed(told(config, ours), replace(run, output_dir=str(path)))
    if not leads_launch(env):
        return ours, job, None
    try:
        return ours, job, RunDirectory.claim(path, resumes(run.ckpt_path, path), overwrite, made)
    except ConfigError:
        RunDirectory(directory, None, made, None).discard_unstarted()
        raise


def told(config: DictConfig, overrides: list[str]) -> DictConfig:
    """``config`` as if Hydra had been given ``overrides`` first: each key set to its value, and
    recorded where Hydra records an override (``.hydra/overrides.yaml`` holds the task's)."""
    config = copy.deepcopy(config)
    with read_write(config), open_dict(config), read_write(config.hydra), open_dict(config.hydra):
        for override in reversed(overrides):
            key, value = override.split("=", 1)
            OmegaConf.update(config, key, value)
            kept = config.hydra.overrides.hydra if key.startswith("hydra.") else config.hydra.overrides.task
            kept.insert(0, override)
    return config
