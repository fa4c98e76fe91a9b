"""The run's config composed and checked once, before anything is written, so that a mistake costs
one line and no run directory.

Hydra reports a misspelt key, a value of the wrong type or an unknown group option in several
lines that end in its ``HYDRA_FULL_ERROR`` hint. :func:`compose_jobs` composes every job of a
launch once (:func:`compose_sweep` a sweep's own config), turns each such error into one line
that names the key and the allowed values or the nearest key, and checks each job's values against
the rules of ``seq2seq/config/``; what it cannot explain is Hydra's own message.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytorch_lightning as pl
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict, read_write
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from seq2seq.config import ConfigError, RunConfig, dotted, validated_run
from seq2seq.launch.command_line import grid_jobs

CONFIG_NAME = "train"  # configs/train.yaml, the primary config of train.py


class Composed(NamedTuple):
    """One job: its config with Hydra's node (what Hydra writes to ``.hydra/``) and, where it
    trains, the run it validates into."""

    config: DictConfig
    run: RunConfig | None


def compose_run(config_dir: Path, overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """The config of one run, composed from ``configs/train.yaml`` as ``train.py`` composes it
    (``with_hydra``: with Hydra's own node, ``hydra.run.dir`` and the rest)."""
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(CONFIG_NAME, overrides=overrides, return_hydra_config=with_hydra)


def without_hydra(config: DictConfig) -> DictConfig:
    """The run's own keys of a config composed ``with_hydra``, as Hydra hands them to the run."""
    task = config.copy()
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task


def unknown_key(key: str, config_dir: Path, overrides: list[str]) -> str:
    """One line for a key that the composed config lacks: the nearest key, or the keys there are."""
    groups = {path.name for path in config_dir.iterdir() if path.is_dir()}
    choices = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in groups]
    keys = dotted(compose_run(config_dir, choices))
    parent, _, name = key.rpartition(".")
    if parent == "trainer" and name in inspect.signature(pl.Trainer.__init__).parameters:
        return (
            f"trainer.{name} is a Lightning Trainer argument that configs/trainer/ does not set: "
            f"add it with +trainer.{name}=..."
        )
    within = f"{parent}." if parent else ""
    siblings = sorted({k.removeprefix(within).split(".")[0] for k in keys if k.startswith(within)})
    if close := difflib.get_close_matches(name, siblings, n=1):
        return f"{key} is not a config key; did you mean {within}{close[0]}?"
    return f"{key} is not a config key; {parent or 'the config'} has {', '.join(siblings)}"


def explain(err: HydraException, config_dir: Path, overrides: list[str]) -> str | None:
    """One line for a composition error that an override caused, or None to leave it to Hydra."""
    if isinstance(err, MissingConfigException) and err.options and err.missing_cfg_file:
        group, _, name = err.missing_cfg_file.rpartition("/")
        close = difflib.get_close_matches(name, err.options, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"{group}={name} is not an option{hint}; {group} is one of {', '.join(sorted(err.options))}"
    cause = err.__cause__
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and cause.full_key:
        return unknown_key(cause.full_key, config_dir, overrides)
    if isinstance(cause, ValidationError) and cause.full_key:
        given = next(
            (o for o in overrides if o.lstrip("+~").split("=", 1)[0] == cause.full_key), cause.full_key
        )
        return f"{given}: {str(cause.msg).splitlines()[0]}"
    return None


@contextlib.contextmanager
def explained(config_dir: Path, overrides: list[str]) -> Iterator[None]:
    """A composition error that ``overrides`` explain raised as a one-line :class:`ConfigError`;
    Hydra's own otherwise."""
    try:
        yield
    except HydraException as err:
        if line := explain(err, config_dir, overrides):
            raise ConfigError(line) from err
        raise


def compose_jobs(config_dir: Path, jobs: list[list[str]], validate: bool) -> list[Composed]:
    """Each job's config (``with_hydra``) and (``validate``) its run, or a one-line
    :class:`ConfigError` for the first job with a bad key, option or type, or a value that breaks a
    rule; an error that no override explains is Hydra's own, raised as it is."""
    composed = []
    for overrides in jobs:
        with explained(config_dir, overrides):
            config = compose_run(config_dir, overrides, with_hydra=True)
        composed.append(Composed(config, validated_run(without_hydra(config)) if validate else None))
    return composed


def compose_sweep(config_dir: Path, overrides: list[str]) -> DictConfig:
    """A sweep's own config, as Hydra's ``multirun`` composes it before its sweeper starts (the
    swept keys left as the config sets them; ``multirun.yaml``), or a one-line :class:`ConfigError`."""
    fixed = [
        o.input_line for o in OverridesParser.create().parse_overrides(overrides) if not o.is_sweep_override()
    ]
    with explained(config_dir, fixed), initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        app = GlobalHydra.instance().hydra
        assert app is not None  # initialize_config_dir made it
        return app.compose_config(CONFIG_NAME, overrides, run_mode=RunMode.MULTIRUN)


def grid(config_dir: Path, sweep: DictConfig) -> list[list[str]]:
    """The overrides of each job of ``sweep`` (composed by :func:`compose_sweep`) that Hydra's basic
    sweeper would launch: the sweep's Hydra overrides, then one value of each of the sweeper's
    ``params`` and the task's overrides, as Hydra's launcher composes a job."""
    params = [f"{key}={value}" for key, value in (sweep.hydra.sweeper.params or {}).items()]
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        jobs = grid_jobs([*params, *sweep.hydra.overrides.task], GlobalHydra.instance().config_loader())
    return [[*sweep.hydra.overrides.hydra, *job] for job in jobs]
