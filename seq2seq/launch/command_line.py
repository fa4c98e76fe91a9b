"""``train.py``'s command line read as Hydra reads it: its flags, its overrides, a sweep's jobs."""

from __future__ import annotations

import argparse
import itertools

import hydra
from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType

from seq2seq.config import ConfigError

INFO_CHOICES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
HYDRA_ALONE = ("help", "hydra_help", "shell_completion", "experimental_rerun")  # Hydra answers these itself
OTHER_CONFIG = ("config_name", "config_path", "config_dir")  # flags that point Hydra at another config


def hydra_parser() -> argparse.ArgumentParser:
    """The flags ``@hydra.main`` takes, read as its own parser reads them (which is Hydra's private
    code: tests/launch/test_recipe.py holds the two together)."""
    parser = argparse.ArgumentParser(add_help=False, description="Hydra")
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
    parser.add_argument("--info", "-i", const="all", nargs="?", choices=INFO_CHOICES)
    return parser


def hydra_args(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed as Hydra parses it (flags, and the overrides in ``overrides``)."""
    return hydra_parser().parse_args(argv)


def for_hydra_alone(args: argparse.Namespace) -> bool:
    """Whether Hydra answers ``args`` from the command line as typed: its help, shell completion, a
    rerun, another primary config than ``configs/train.yaml``, or flags it refuses together."""
    commands = sum(map(bool, (args.run, args.multirun, args.cfg, args.shell_completion, args.info)))
    return (
        any(getattr(args, flag) for flag in (*HYDRA_ALONE, *OTHER_CONFIG))
        or commands > 1
        or (args.resolve and args.cfg is None)
    )


def names_key(overrides: list[str], key: str) -> bool:
    """Whether the overrides set ``key`` (e.g. ``hydra.run.dir``) themselves."""
    return any(arg.lstrip("+").startswith(f"{key}=") for arg in overrides)


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


def grid_jobs(overrides: list[str], config_loader: ConfigLoader) -> list[list[str]]:
    """Every job of a grid sweep, as Hydra's basic sweeper lists them: one value of each swept key,
    the last key changing fastest; a key given twice keeps its first place and its last value.
    ``config_loader`` lists a group's options for ``glob(...)``."""
    values: dict[str, list[str]] = {}
    for o in OverridesParser.create(config_loader).parse_overrides(overrides):
        key = o.get_key_element()
        if not o.is_sweep_override():
            values[key] = [f"{key}={o.get_value_element_as_str()}"]
        elif o.is_discrete_sweep():
            values[key] = [f"{key}={value}" for value in o.sweep_string_iterator()]
        else:
            raise ConfigError(
                f"{o.input_line}: the basic sweeper takes lists and ranges, not intervals; "
                "an Optuna search samples them (hparams_search=lr_optuna)"
            )
    return [list(job) for job in itertools.product(*values.values())]
