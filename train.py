"""Train a translation model: ``python train.py [hydra overrides]`` (``--help`` lists them)."""

import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

import seq2seq.threads  # noqa: F401  (first of ours, and nothing above loads torch: see its docstring)

# isort: split
import torch

from seq2seq.checkpoint import CheckpointError
from seq2seq.config import ConfigError, DataError
from seq2seq.training.launch import launch_id, run_dir_conflict, with_rank_overrides
from seq2seq.training.module import NonFiniteLossError
from seq2seq.training.overrides import check_overrides
from seq2seq.training.recipe import choose_recipe
from seq2seq.training.run import discard_unstarted_run, run_directory, train

CONFIGS = Path(__file__).resolve().parent / "configs"
RECIPE = "recipe: the experiment in configs/train.yaml"  # replaced by the hardware's choice below


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Run training; expected failures print one line and exit non-zero instead of a traceback."""
    logging.getLogger(__name__).info("%s", RECIPE)
    try:
        metrics = train(cfg)
    except (ConfigError, DataError) as err:  # found before training: nothing worth keeping
        discard_unstarted_run(run_directory(cfg))
        sys.exit(f"error: {err}")
    except (CheckpointError, NonFiniteLossError) as err:
        sys.exit(f"error: {err}")
    except KeyboardInterrupt:  # before training started; once it runs, Lightning saves and exits
        sys.exit("interrupted")
    return metrics.get("val/bleu")  # the value --multirun sweepers optimise


if __name__ == "__main__":
    argv, RECIPE = choose_recipe(
        sys.argv[1:], torch.cuda.get_device_name() if torch.cuda.is_available() else None, CONFIGS
    )
    if conflict := run_dir_conflict(argv, os.environ):
        sys.exit(f"error: {conflict}")
    try:  # before Hydra creates the run directory, and in one line where Hydra would print several
        check_overrides(argv, CONFIGS)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    sys.argv[1:] = with_rank_overrides(argv, os.environ)  # torchrun/srun: rank > 0 writes no .hydra/
    # configs/train.yaml: runs/${launch_id:${now:...}}, the same directory for every process of a launch
    OmegaConf.register_new_resolver(
        "launch_id", lambda fallback: launch_id(os.environ) or fallback, use_cache=True
    )
    main()
