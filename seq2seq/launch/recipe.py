"""Which experiment ``python train.py`` runs when the command line names none: the GPU recipe on a
machine with a CUDA GPU, the CPU recipe elsewhere. This is the one place that decides it
(configs/train.yaml leaves ``experiment`` unset). It goes first among the overrides as an ordinary
one, so ``.hydra/overrides.yaml`` shows it and an explicit ``experiment=...`` always wins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from seq2seq.config import dotted

GPU_RECIPE = "spa_en_gpu"
CPU_RECIPE = "spa_en_cpu"


def names_an_experiment(overrides: list[str]) -> bool:
    """Whether the Hydra overrides choose the experiment themselves (``experiment=``, ``+experiment=``...)."""
    return any(arg.lstrip("+~").startswith("experiment=") for arg in overrides)


def what_a_file_sets(path: Path) -> tuple[list[str], dict[str, Any]]:
    """A config file's defaults list, in order (``group=option`` for an option it picks, a bare name
    for a file it builds on; ``_self_`` left out), and the values it sets by dotted key (Hydra's own
    ``hydra.*`` left out)."""
    cfg = OmegaConf.load(path)
    picks = []
    for entry in cfg.pop("defaults", []):
        if isinstance(entry, str):
            picks += [] if entry == "_self_" else [entry]
        else:
            picks += [f"{group.removeprefix('override /')}={option}" for group, option in entry.items()]
    return picks, {key: value for key, value in dotted(cfg).items() if not key.startswith("hydra.")}


def what_it_sets(config_dir: Path, experiment: str) -> str:
    """``configs/experiment/<experiment>.yaml`` in one line: the options it picks, then its keys."""
    picks, values = what_a_file_sets(config_dir / "experiment" / f"{experiment}.yaml")
    return ", ".join(picks + [f"{key}={value}" for key, value in values.items()])


def choose_recipe(overrides: list[str], gpu: str | None, config_dir: Path) -> tuple[list[str], str]:
    """The command line's ``overrides`` with the hardware's experiment first where they name none,
    and the line that says so. ``gpu`` is the CUDA device's name, or None on a machine without one."""
    if names_an_experiment(overrides):
        return overrides, "recipe: the experiment given on the command line"
    if gpu is not None:
        chosen, why = GPU_RECIPE, f"CUDA GPU: {gpu}; experiment={CPU_RECIPE} trains the CPU recipe"
    else:
        chosen, why = CPU_RECIPE, f"no CUDA GPU; experiment={GPU_RECIPE} needs one"
    line = f"recipe: added experiment={chosen} ({why}): {what_it_sets(config_dir, chosen)}"
    return [f"experiment={chosen}", *overrides], line
