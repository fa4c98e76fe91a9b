"""Which experiment ``python train.py`` runs when the command line names none: the GPU recipe on a
machine with a CUDA GPU, the CPU recipe elsewhere. Decided on the command line, before Hydra
composes the config, so the choice is an ordinary override: visible in ``.hydra/overrides.yaml``
and in ``config.yaml``, and an explicit ``experiment=...`` always wins."""

from __future__ import annotations

GPU_RECIPE = "spa_en_gpu"
CPU_RECIPE = "spa_en_cpu"


def names_an_experiment(overrides: list[str]) -> bool:
    """Whether the Hydra overrides choose the experiment themselves (``experiment=``, ``+experiment=``...)."""
    return any(arg.lstrip("+~").startswith("experiment=") for arg in overrides)


def choose_recipe(argv: list[str], gpu: str | None) -> tuple[list[str], str]:
    """``argv`` with the hardware's experiment added when it names none, and the line that says so.

    ``gpu`` is the CUDA device's name, or None on a machine without one.
    """
    if names_an_experiment(argv):
        return argv, "recipe: the experiment given on the command line"
    if gpu is not None:
        return [*argv, f"experiment={GPU_RECIPE}"], (
            f"recipe: {GPU_RECIPE} (CUDA GPU: {gpu}); experiment={CPU_RECIPE} trains the CPU recipe"
        )
    return [*argv, f"experiment={CPU_RECIPE}"], (
        f"recipe: {CPU_RECIPE} (no CUDA GPU); experiment={GPU_RECIPE} needs one"
    )
