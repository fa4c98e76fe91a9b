"""What Hydra does with a plan, through Hydra's own ``run_job`` (logging, ``.hydra/`` files,
callbacks) on the configs the plan composed: a planned run, and a planned sweep as Hydra's basic
sweeper and launcher run it. From the plan's overrides: a sweep with a sweeper or launcher plugin
(Optuna, joblib, submitit), which composes its jobs itself, ``--cfg`` and ``--info``."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job
from hydra.errors import CompactHydraException
from hydra.types import HydraContext
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from seq2seq.config import RunConfig
from seq2seq.launch.composing import CONFIG_NAME
from seq2seq.launch.plan import Sweep
from seq2seq.launch.ranks import RUN_DIR, SWEEP_DIR

T = TypeVar("T")
FULL_ERROR = "HYDRA_FULL_ERROR"  # Hydra's switch from its short report of an error to the traceback
SWEEP_SUBDIR = "hydra.sweep.subdir"  # a sweep's job's directory within hydra.sweep.dir

log = logging.getLogger(__name__)


class HydraCallbacks:
    """The ``hydra.callbacks`` a config names, called where Hydra's own run calls them."""

    def __init__(self, config: DictConfig) -> None:
        self.each = [instantiate(callback) for callback in config.hydra.callbacks.values()]

    def on_run_start(self, **kwargs: Any) -> None:
        for callback in self.each:
            callback.on_run_start(**kwargs)

    def on_multirun_start(self, **kwargs: Any) -> None:
        for callback in self.each:
            callback.on_multirun_start(**kwargs)

    def on_job_start(self, **kwargs: Any) -> None:
        for callback in self.each:
            callback.on_job_start(**kwargs)

    def on_job_end(self, **kwargs: Any) -> None:
        for callback in reversed(self.each):
            callback.on_job_end(**kwargs)

    def on_run_end(self, **kwargs: Any) -> None:
        for callback in reversed(self.each):
            callback.on_run_end(**kwargs)

    def on_multirun_end(self, **kwargs: Any) -> None:
        for callback in reversed(self.each):
            callback.on_multirun_end(**kwargs)


def run_in_directory(config: DictConfig, task: Callable[[], T]) -> T:
    """``task`` run as Hydra runs a job of ``config`` (composed with Hydra's node): logging set up
    from ``hydra.hydra_logging`` and ``hydra.job_logging``, ``hydra.run.dir`` made, and
    ``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml`` written there (Hydra's own
    ``run_job``, which composes nothing)."""
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    callbacks = HydraCallbacks(config)
    callbacks.on_run_start(config=config, config_name=CONFIG_NAME)
    done = run_job(
        task_function=lambda _: task(),
        config=config,
        job_dir_key=RUN_DIR,
        job_subdir_key=None,
        hydra_context=HydraContext(config_loader=None, callbacks=callbacks),  # type: ignore[arg-type]
    )
    callbacks.on_run_end(config=config, config_name=CONFIG_NAME, job_return=done)
    return done.return_value  # raises what the task raised


def run_sweep(sweep: Sweep, task: Callable[[RunConfig], T]) -> list[T]:
    """``task`` given each job's run, as Hydra 1.3's basic sweeper and launcher run a sweep, minus
    the composing: ``multirun.yaml`` in ``hydra.sweep.dir``, the jobs in batches of the sweeper's
    ``max_batch_size``, each numbered (``hydra.job.num`` and ``id``) and run by Hydra's ``run_job``
    in its ``hydra.sweep.subdir``. Returns each job's value; a job that raised stops the sweep
    once its batch has run, raising it."""
    config = sweep.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    callbacks = HydraCallbacks(config)
    callbacks.on_multirun_start(config=config, config_name=CONFIG_NAME)
    sweep_dir = Path(config.hydra.sweep.dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")
    size = config.hydra.sweeper.max_batch_size
    size = size if size is not None and size > 0 else len(sweep.jobs)
    values: list[T] = []
    for first in range(0, len(sweep.jobs), size):
        done = launch(sweep, first, size, task, callbacks)
        values += [job.return_value for job in done]  # raises what a failed job raised
    callbacks.on_multirun_end(config=config, config_name=CONFIG_NAME)
    return values


def launch(
    sweep: Sweep, first: int, size: int, task: Callable[[RunConfig], T], callbacks: HydraCallbacks
) -> list[JobReturn]:
    """One batch of a sweep's jobs, from job number ``first``, as Hydra's basic launcher runs it."""
    config = sweep.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    batch = sweep.jobs[first : first + size]
    log.info("Launching %d jobs locally", len(batch))
    done = []
    for num, job in enumerate(batch, first):
        log.info("\t#%d : %s", num, " ".join(filter_overrides(job.config.hydra.overrides.task)))
        with open_dict(job.config):
            job.config.hydra.job.id = job.config.hydra.job.num = num
        context = HydraContext(config_loader=None, callbacks=callbacks)  # type: ignore[arg-type]
        done.append(run_job(lambda _, run=job.run: task(run), job.config, SWEEP_DIR, SWEEP_SUBDIR, context))
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    return done


def run_with_hydra(
    config_dir: Path, args: argparse.Namespace, overrides: list[str], task: Callable[[DictConfig], Any]
) -> None:
    """A sweep with a plugin (Hydra composes each job for its launcher, which calls ``task``),
    ``--cfg`` or ``--info``, as ``@hydra.main`` runs them, given ``overrides`` (the plan's) rather
    than the command line."""
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3", job_name="train"):
        app = GlobalHydra.instance().hydra
        assert app is not None  # initialize_config_dir made it
        if args.cfg:
            app.show_cfg(CONFIG_NAME, overrides, args.cfg, args.package, args.resolve)
        elif args.info:
            app.show_info(args.info, config_name=CONFIG_NAME, overrides=overrides)
        else:
            app.multirun(CONFIG_NAME, task, overrides)


def hydra_report(err: CompactHydraException) -> str | None:
    """What ``@hydra.main`` prints for an error of Hydra's own, such as an override it cannot parse:
    its message and a pointer to ``HYDRA_FULL_ERROR=1``; None where that is set (raise it whole)."""
    if os.environ.get(FULL_ERROR) == "1":
        return None
    cause = f"\n{err.__cause__}" if isinstance(err.__cause__, OmegaConfBaseException) else ""
    return f"{err}{cause}\n\nSet the environment variable {FULL_ERROR}=1 for a complete stack trace."
