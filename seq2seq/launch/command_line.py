"""``train.py``'s command line as Hydra reads it, and overrides added where Hydra takes them."""

from __future__ import annotations

import argparse

from hydra._internal.utils import get_args
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType

SHOWS_WITHOUT_RUNNING = ("help", "hydra_help", "cfg", "info", "shell_completion", "experimental_rerun")
OTHER_CONFIG = ("config_name", "config_path", "config_dir")  # flags that point Hydra at another config


def hydra_args(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by Hydra's own parser (flags, and the overrides in ``overrides``)."""
    return get_args(argv)


def runs_a_job(args: argparse.Namespace) -> bool:
    """Whether Hydra, given ``args``, trains (``--multirun`` or not), rather than printing a config,
    its help or its information, or composing another primary config than ``configs/train.yaml``."""
    return not any(getattr(args, flag) for flag in (*SHOWS_WITHOUT_RUNNING, *OTHER_CONFIG))


def insert_overrides(argv: list[str], extra: list[str]) -> list[str]:
    """``argv`` with ``extra`` just before its overrides, or first if it has none: Hydra takes its
    overrides as one run of arguments, and ``--info`` would read one given after it as its value.
    A key given twice takes the later value, so the user's own overrides still win."""
    overrides = hydra_args(argv).overrides
    start = next(
        (i for i in range(len(argv)) if argv[i : i + len(overrides)] == overrides), 0
    )  # always found: the overrides are consecutive arguments
    return [*argv[:start], *extra, *argv[start:]]


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
