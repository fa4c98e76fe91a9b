"""Which experiment ``python train.py`` runs when the command line names none: the GPU recipe on a
machine with a CUDA GPU, the CPU recipe elsewhere. Decided on the command line, before Hydra
composes the config, so the choice is an ordinary override: visible in ``.hydra/overrides.yaml``
and in ``config.yaml``, and an explicit ``experiment=...`` always wins."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from seq2seq.training.overrides import hydra_args, insert_overrides

GPU_RECIPE = "spa_en_gpu"
CPU_RECIPE = "spa_en_cpu"


def names_an_experiment(overrides: list[str]) -> bool:
    """Whether the Hydra overrides choose the experiment themselves (``experiment=``, ``+experiment=``...)."""
    return any(arg.lstrip("+~").startswith("experiment=") for arg in overrides)


def settings(cfg: DictConfig, prefix: str = "") -> list[str]:
    """The ``key=value`` pairs a config file sets, dotted (``optim.lr=0.0015``)."""
    pairs = []
    for key, value in cfg.items():
        if isinstance(value, DictConfig):
            pairs += settings(value, f"{prefix}{key}.")
        else:
            pairs.append(f"{prefix}{key}={value}")
    return pairs


def what_it_sets(config_dir: Path, experiment: str) -> str:
    """``configs/experiment/<experiment>.yaml`` in one line: the options it picks, then its keys."""
    cfg = OmegaConf.load(config_dir / "experiment" / f"{experiment}.yaml")
    picks = [
        f"{group.removeprefix('override /')}={option}"
        for entry in cfg.pop("defaults", [])
        for group, option in entry.items()
    ]
    return ", ".join(picks + settings(cfg))


def choose_recipe(argv: list[str], gpu: str | None, config_dir: Path) -> tuple[list[str], str]:
    """``argv`` with the hardware's experiment added when it names none, and the line that says so.

    ``gpu`` is the CUDA device's name, or None on a machine without one.
    """
    if names_an_experiment(hydra_args(argv).overrides):
        return argv, "recipe: the experiment given on the command line"
    if gpu is not None:
        chosen, why = GPU_RECIPE, f"CUDA GPU: {gpu}; experiment={CPU_RECIPE} trains the CPU recipe"
    else:
        chosen, why = CPU_RECIPE, f"no CUDA GPU; experiment={GPU_RECIPE} needs one"
    line = f"recipe: added experiment={chosen} ({why}): {what_it_sets(config_dir, chosen)}"
    return insert_overrides(argv, [f"experiment={chosen}"]), line
