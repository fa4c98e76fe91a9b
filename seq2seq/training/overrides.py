"""``train.py``'s command line before Hydra runs: Hydra's flags parsed, overrides added where Hydra
takes them, and a composition error turned into one line.

Hydra reports a misspelt key, a value of the wrong type or an unknown group option in several
lines that end in its ``HYDRA_FULL_ERROR`` hint, and no callback of ours runs when composing fails
(callbacks come from the composed config). So :func:`check_overrides` composes the config as
Hydra will, every job of a sweep once per value, and turns each such error into one line that
names the key and the allowed values or the nearest key; what it cannot explain it leaves to Hydra.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
from pathlib import Path

import hydra
import pytorch_lightning as pl
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from seq2seq.config import ConfigError, dotted

CONFIG_NAME = "train"  # configs/train.yaml, the primary config of train.py
INFO_TOPICS = ["all", "config", "defaults", "defaults-tree", "plugins", "searchpath"]


def hydra_flags() -> argparse.ArgumentParser:
    """A parser of the flags ``python train.py --hydra-help`` lists, read as ``@hydra.main`` reads
    them: every other argument is an override."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--help", "-h", action="store_true")
    parser.add_argument("--hydra-help", action="store_true")
    parser.add_argument("--version", action="version", version=f"Hydra {hydra.__version__}")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--cfg", "-c", choices=["job", "hydra", "all"])
    parser.add_argument("--resolve", action="store_true")
    parser.add_argument("--package", "-p")
    parser.add_argument("--run", "-r", action="store_true")
    parser.add_argument("--multirun", "-m", action="store_true")
    parser.add_argument("--shell-completion", "-sc", action="store_true")
    parser.add_argument("--config-path", "-cp")
    parser.add_argument("--config-name", "-cn")
    parser.add_argument("--config-dir", "-cd")
    parser.add_argument("--experimental-rerun")
    parser.add_argument("--info", "-i", const="all", nargs="?", choices=INFO_TOPICS)
    return parser


def hydra_args(argv: list[str]) -> argparse.Namespace:
    """``argv`` as Hydra reads it (flags, and the overrides in ``overrides``)."""
    return hydra_flags().parse_args(argv)


def insert_overrides(argv: list[str], extra: list[str]) -> list[str]:
    """``argv`` with ``extra`` just before its overrides, or first if it has none: Hydra takes its
    overrides as one run of arguments, and ``--info`` would read one given after it as its value.
    A key given twice takes the later value, so the user's own overrides still win."""
    overrides = hydra_args(argv).overrides
    start = next(
        (i for i in range(len(argv)) if argv[i : i + len(overrides)] == overrides), 0
    )  # always found: the overrides are consecutive arguments
    return [*argv[:start], *extra, *argv[start:]]


def compose_run(config_dir: Path, overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """The config of one run, composed from ``configs/train.yaml`` as ``train.py`` composes it
    (``with_hydra``: with Hydra's own node, ``hydra.run.dir`` and the rest)."""
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(CONFIG_NAME, overrides=overrides, return_hydra_config=with_hydra)


def job_overrides(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override lists that together try every value of a sweep once: its first job, then that
    job with one swept key at another value. Interval sweeps (an Optuna search) are left out."""
    if not multirun:
        return [overrides]
    parsed = [
        o
        for o in OverridesParser.create().parse_overrides(overrides)
        if o.value_type != ValueType.INTERVAL_SWEEP
    ]
    values = [
        [f"{o.get_key_element()}={value}" for value in o.sweep_string_iterator()]
        if o.is_sweep_override()
        else [o.input_line]
        for o in parsed
    ]
    first = [choices[0] for choices in values]
    others = [
        [*first[:i], value, *first[i + 1 :]] for i, choices in enumerate(values) for value in choices[1:]
    ]
    return [first, *others]


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


def check_overrides(argv: list[str], config_dir: Path) -> None:
    """Raise :class:`ConfigError` with one line if the overrides of ``argv`` name an unknown key or
    option or give a value of the wrong type; silent where Hydra's own message is the answer. The
    rules of ``seq2seq/config.py`` are checked later, once, by the run itself."""
    args = hydra_args(argv)
    asks_hydra = args.help or args.hydra_help or args.shell_completion or args.experimental_rerun
    if asks_hydra or args.config_name or args.config_path or args.config_dir:  # or another config
        return
    try:
        jobs = job_overrides(args.overrides, args.multirun)
    except HydraException:  # the grammar itself: Hydra points at the character
        return
    for overrides in jobs:
        try:
            compose_run(config_dir, overrides)
        except HydraException as err:
            if line := explain(err, config_dir, overrides):
                raise ConfigError(line) from err
            return
