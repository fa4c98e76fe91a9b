"""From ``python train.py [overrides]`` to a validated run training in a claimed directory, in the
order it happens:

1. :func:`~seq2seq.launch.plan.plan_launch`: the hardware's recipe where the command line names
   none, ``init_from``'s model keys and this process's rank overrides; every job composed and
   validated once (a mistake is one line, before any directory exists); a run's directory named
   and claimed.
2. A single run: Hydra's logging and ``.hydra/`` files from that one config
   (:func:`~seq2seq.launch.with_hydra.run_in_directory`), then :func:`run_job`. A sweep with
   Hydra's basic sweeper and launcher: each planned job so, numbered in its sweep directory
   (:func:`~seq2seq.launch.with_hydra.run_sweep`). A sweep with a plugin, ``--cfg`` and ``--info``:
   Hydra, given the plan's overrides; Hydra's help and another config: Hydra, given the command
   line as typed.
3. :func:`start_run`: the run directory (a sweep's job claims its own), this machine's choices
   settled (:func:`~seq2seq.machine.hardware.settle_machine_choices`), then
   :func:`seq2seq.training.run.train`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from omegaconf import DictConfig
from pytorch_lightning.utilities import rank_zero_only
from pytorch_lightning.utilities.exceptions import SIGTERMException

from seq2seq.command_line import INTERRUPTED, TERMINATED
from seq2seq.config import ConfigError, DataError, RunConfig, validated_run
from seq2seq.formats.checkpoint import CheckpointError
from seq2seq.formats.run_directory import RunDirectory, resumes
from seq2seq.launch.command_line import for_hydra_alone
from seq2seq.launch.composing import CONFIG_NAME
from seq2seq.launch.plan import plan_launch
from seq2seq.launch.ranks import leads_launch
from seq2seq.launch.with_hydra import hydra_report, run_in_directory, run_sweep, run_with_hydra
from seq2seq.machine.hardware import settle_machine_choices
from seq2seq.training.module import NonFiniteLossError
from seq2seq.training.requeue import RequeueOnSignal
from seq2seq.training.run import train

log = logging.getLogger(__name__)


def start_run(
    run: RunConfig, claimed: RunDirectory | None = None, env: Mapping[str, str] = os.environ
) -> dict[str, float]:
    """Train as ``run`` says in its ``output_dir``, which ``claimed`` holds or this process claims
    (a sweep's job, a run started without ``train.py``); returns the final logged metrics. A run
    that fails before training leaves nothing of its own behind."""
    path = Path(run.output_dir)
    if claimed is not None:
        run_dir = claimed
    elif leads_launch(env):
        run_dir = RunDirectory.claim(path, resumes(run.ckpt_path, path), run.overwrite_output_dir)
    else:  # another process of the launch: its rank 0 holds the directory
        run_dir = RunDirectory.joined(path)
    try:
        run_dir.check_usable()
        run, header = settle_machine_choices(run)
        return train(run, run_dir, header)
    except (ConfigError, DataError):  # found before training: nothing worth keeping
        run_dir.discard_unstarted()
        raise
    finally:
        run_dir.release()


def in_job_directory(run: RunConfig) -> RunConfig:
    """A sweep's job (or a run of another config) in the directory Hydra made for it, unless it
    names its own ``output_dir``."""
    return replace(run, output_dir=run.output_dir or HydraConfig.get().runtime.output_dir)


def error_lines(err: Exception) -> str:
    """What stderr gets for an expected failure: ``error: ...``, one line per thing to fix (an
    ``init_from`` that differs in two keys gives two)."""
    return "\n".join(f"error: {line}" for line in str(err).splitlines())


def run_job(run: RunConfig, claimed: RunDirectory | None, recipe: str) -> float | None:
    """A run, with expected failures as one line and a non-zero exit instead of a traceback; returns
    ``val/bleu``, the value ``--multirun`` sweepers optimise."""
    if recipe:
        log.info("%s", recipe)
    try:
        with RequeueOnSignal(rank_zero_only.rank).armed():  # from the start: data preparation too
            metrics = start_run(run, claimed)
    except (ConfigError, DataError, CheckpointError, NonFiniteLossError) as err:
        sys.exit(error_lines(err))
    except KeyboardInterrupt:  # Ctrl-C: before training, or during it once last.ckpt is saved
        print("interrupted", file=sys.stderr)
        sys.exit(INTERRUPTED)
    except SIGTERMException:  # raised by Lightning between batches, once last.ckpt is saved
        sys.exit(TERMINATED)
    return metrics.get("val/bleu")


def main(config_dir: Path) -> None:
    """``python train.py``: the launch planned, then the run, or what Hydra does with the plan."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    try:
        plan = plan_launch(sys.argv[1:], os.environ, gpu, config_dir)
    except ConfigError as err:
        sys.exit(error_lines(err))
    except CompactHydraException as err:  # no override explains it: Hydra's own report
        if (report := hydra_report(err)) is None:
            raise
        sys.exit(report)
    job = plan.job
    if job is not None and job.run is not None:
        run_in_directory(job.config, lambda: run_job(job.run, plan.run_dir, plan.recipe))
        return
    if plan.sweep is not None:
        run_sweep(plan.sweep, lambda run: run_job(in_job_directory(run), None, plan.recipe))
        return

    def task(cfg: DictConfig) -> float | None:  # a job Hydra composed: validated here
        return run_job(in_job_directory(validated_run(cfg)), None, plan.recipe)

    if for_hydra_alone(plan.args):
        hydra.main(version_base="1.3", config_path=str(config_dir), config_name=CONFIG_NAME)(task)()
    else:
        run_with_hydra(config_dir, plan.args, plan.overrides, task)
