"""From ``python train.py [overrides]`` to a validated run training in a claimed directory, in the
order it happens:

1. Before Hydra, what Hydra cannot do: the hardware's recipe added where the command line names
   none, ``init_from``'s model keys, every job composed and checked once (a mistake is one line,
   before any directory exists) and this process's rank overrides (:func:`prepare_launch`); then
   the directory named, and a run's claimed, before Hydra writes its files there
   (:func:`claim_directory`).
2. Hydra composes the config, makes the directory, writes ``.hydra/`` and the log, and calls
   :func:`run_job`.
3. :func:`start_run`: the config validated into a :class:`~seq2seq.config.RunConfig`, the run
   directory (a sweep's job claims its own), this machine's choices settled
   (:func:`~seq2seq.machine.hardware.settle_machine_choices`), then
   :func:`seq2seq.training.run.train`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities import rank_zero_only
from pytorch_lightning.utilities.exceptions import SIGTERMException

from seq2seq.command_line import INTERRUPTED, TERMINATED
from seq2seq.config import ConfigError, DataError, validated_run
from seq2seq.formats.checkpoint import CheckpointError
from seq2seq.formats.run_directory import RunDirectory, fresh_directory, resumes
from seq2seq.launch.command_line import hydra_args, insert_overrides, job_overrides, names_key, runs_a_job
from seq2seq.launch.composing import CONFIG_NAME, compose_jobs
from seq2seq.launch.ranks import (
    RUN_DIR,
    SWEEP_DIR,
    launch_id,
    leads_launch,
    register_resolvers,
    run_dir_conflict,
    with_rank_overrides,
)
from seq2seq.launch.recipe import choose_recipe
from seq2seq.machine.hardware import settle_machine_choices
from seq2seq.training.module import NonFiniteLossError
from seq2seq.training.requeue import RequeueOnSignal, requeued_checkpoint, starts_over
from seq2seq.training.run import train
from seq2seq.training.starting_point import start_overrides

log = logging.getLogger(__name__)


class Launch(NamedTuple):
    """What the command line becomes before Hydra runs."""

    argv: list[str]  # what Hydra parses: the user's command line plus the recipe and ours
    recipe: str  # the line that says which experiment runs and why
    config: DictConfig | None  # the (first) job's config as Hydra will compose it, where Hydra trains
    run_dir: RunDirectory | None = None  # a run's directory, claimed by its rank 0 (:func:`claim_directory`)


def prepare_launch(argv: list[str], env: Mapping[str, str], gpu: str | None, config_dir: Path) -> Launch:
    """``train.py``'s command line made ready for Hydra, or a one-line :class:`ConfigError` (``gpu``:
    the CUDA device's name, or None). Composes, and writes nothing."""
    register_resolvers()
    with_recipe, recipe = choose_recipe(argv, gpu, config_dir)
    keys, start = start_overrides(hydra_args(argv).overrides)
    if keys:
        with_recipe = insert_overrides(with_recipe, keys)
        kinds = "model and tokenizer" if any(key.startswith("model.") for key in keys) else "tokenizer"
        recipe += f"; the {kinds} keys from init_from={start}, where the command line sets none"
    args = hydra_args(with_recipe)
    config = None
    if not (args.help or args.hydra_help or args.shell_completion or args.experimental_rerun):
        jobs = checked_jobs(args, config_dir)
        config = jobs[0] if jobs and runs_a_job(args) else None
    return Launch(with_rank_overrides(with_recipe, env), recipe, config)


def claim_directory(launch: Launch, env: Mapping[str, str]) -> Launch:
    """``launch`` with its directory named for Hydra and, by the launch's rank 0, claimed
    (:func:`settle_directory`); as it was where Hydra trains nothing."""
    if launch.config is None:
        return launch
    ours, run_dir = settle_directory(launch.config, hydra_args(launch.argv).multirun, env)
    return launch._replace(argv=insert_overrides(launch.argv, ours), run_dir=run_dir)


def checked_jobs(args: argparse.Namespace, config_dir: Path) -> list[DictConfig]:
    """Every job of the command line composed once (``with_hydra``) and its values checked where it
    trains; empty where the command line is another config's or Hydra's own message is the answer."""
    if any(getattr(args, flag) for flag in ("config_name", "config_path", "config_dir")):
        return []
    try:
        jobs = job_overrides(args.overrides, args.multirun)
    except HydraException:  # the grammar itself: Hydra points at the character
        return []
    composed = compose_jobs(config_dir, jobs, validate=runs_a_job(args))
    return composed or []


def settle_directory(
    config: DictConfig, multirun: bool, env: Mapping[str, str]
) -> tuple[list[str], RunDirectory | None]:
    """The overrides that give Hydra a run's (or a sweep's) directory, named before Hydra creates it,
    and the run directory, claimed by the launch's rank 0.

    A default name, the time to the second, gets a suffix if another run has it; a name that the
    user or the launch (:func:`launch_id`) chose is kept, and refused if taken, unless a requeued
    SLURM job finds its own there: then it resumes from its ``last.ckpt``, or starts over where its
    predecessor saved no checkpoint. Each job of a sweep claims its own directory when it starts
    (:func:`start_run`).
    """
    given = [*config.hydra.overrides.hydra, *config.hydra.overrides.task]
    if conflict := run_dir_conflict(given, env):
        raise ConfigError(conflict)
    key = SWEEP_DIR if multirun else RUN_DIR
    directory = Path(OmegaConf.select(config, key))  # ${now:...} and ${launch_id:...} resolve here, once
    made: set[Path] = set()
    if not names_key(given, key) and launch_id(env) is None:
        directory, made = fresh_directory(directory)
    ours = [] if names_key(given, key) else [f"{key}={directory}"]
    if multirun:
        return ours, None
    path = Path(config.output_dir) if config.output_dir else directory
    ckpt_path, overwrite = config.ckpt_path, config.overwrite_output_dir
    if (last := requeued_checkpoint(path, launch_id(env), env)) is not None:  # every rank resumes
        ckpt_path = str(last)
        ours.append(f"ckpt_path={last}")
    elif starts_over(path, launch_id(env), env):
        overwrite = True
    if not leads_launch(env):
        return ours, None
    try:
        return ours, RunDirectory.claim(path, resumes(ckpt_path, path), overwrite, made)
    except ConfigError:
        RunDirectory(directory, None, made, None).discard_unstarted()
        raise


def start_run(
    cfg: DictConfig, claimed: RunDirectory | None = None, env: Mapping[str, str] = os.environ
) -> dict[str, float]:
    """Train as ``cfg``, the composed config, says, in ``claimed`` or the directory this process
    claims (a sweep's job, a run started without ``train.py``); returns the final logged metrics.
    A run that fails before training leaves nothing of its own behind."""
    run = validated_run(cfg)
    path = Path(run.output_dir or HydraConfig.get().runtime.output_dir)
    if claimed is not None:
        run_dir = claimed
    elif leads_launch(env):
        run_dir = RunDirectory.claim(path, resumes(run.ckpt_path, path), run.overwrite_output_dir)
    else:  # another process of the launch: its rank 0 holds the directory
        run_dir = RunDirectory.joined(path)
    try:
        run_dir.check_usable()
        run, header = settle_machine_choices(replace(run, output_dir=str(path)))  # config.yaml: where it went
        return train(run, run_dir, header)
    except (ConfigError, DataError):  # found before training: nothing worth keeping
        run_dir.discard_unstarted()
        raise
    finally:
        run_dir.release()


def error_lines(err: Exception) -> str:
    """What stderr gets for an expected failure: ``error: ...``, one line per thing to fix (an
    ``init_from`` that differs in two keys gives two)."""
    return "\n".join(f"error: {line}" for line in str(err).splitlines())


def run_job(cfg: DictConfig, launch: Launch) -> float | None:
    """Hydra's task: the run, with expected failures as one line and a non-zero exit instead of a
    traceback; returns ``val/bleu``, the value ``--multirun`` sweepers optimise."""
    log.info("%s", launch.recipe)
    try:
        with RequeueOnSignal(rank_zero_only.rank).armed():  # from the start: data preparation too
            metrics = start_run(cfg, launch.run_dir)
    except (ConfigError, DataError, CheckpointError, NonFiniteLossError) as err:
        sys.exit(error_lines(err))
    except KeyboardInterrupt:  # Ctrl-C: before training, or during it once last.ckpt is saved
        print("interrupted", file=sys.stderr)
        sys.exit(INTERRUPTED)
    except SIGTERMException:  # raised by Lightning between batches, once last.ckpt is saved
        sys.exit(TERMINATED)
    return metrics.get("val/bleu")


def main(config_dir: Path) -> None:
    """``python train.py``: the launch prepared, then Hydra, which reads the command line in ``sys.argv``."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    try:
        launch = claim_directory(prepare_launch(sys.argv[1:], os.environ, gpu, config_dir), os.environ)
    except ConfigError as err:
        sys.exit(error_lines(err))
    sys.argv[1:] = launch.argv
    run_with_hydra = hydra.main(version_base="1.3", config_path=str(config_dir), config_name=CONFIG_NAME)
    run_with_hydra(lambda cfg: run_job(cfg, launch))()
