"""Train a translation model: ``python train.py [hydra overrides]`` (``--help`` lists them)."""

import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import seq2seq.threads  # first of ours, and nothing above loads torch: see its docstring
import seq2seq.use_jemalloc  # noqa: F401  (restarts under jemalloc where installed, before torch loads)

# isort: split
import torch
from pytorch_lightning.utilities.exceptions import SIGTERMException

from seq2seq.checkpoint import CheckpointError
from seq2seq.command_line import INTERRUPTED, TERMINATED
from seq2seq.config import ConfigError, DataError
from seq2seq.training.launch import prepare_launch
from seq2seq.training.module import NonFiniteLossError
from seq2seq.training.ownership import RunDirectoryTaken, discard_unstarted_run
from seq2seq.training.run import run_directory, train

CONFIGS = Path(__file__).resolve().parent / "configs"


def main(cfg: DictConfig, recipe: str) -> float | None:
    """Run training; expected failures print one line and exit non-zero instead of a traceback."""
    logging.getLogger(__name__).info("%s", recipe)
    try:
        metrics = train(cfg)
    except RunDirectoryTaken as err:  # another run's directory: not ours to clean up
        sys.exit(f"error: {err}")
    except (ConfigError, DataError) as err:  # found before training: nothing worth keeping
        discard_unstarted_run(run_directory(cfg))
        sys.exit(f"error: {err}")
    except (CheckpointError, NonFiniteLossError) as err:
        sys.exit(f"error: {err}")
    except KeyboardInterrupt:  # Ctrl-C: before training, or during it once last.ckpt is saved
        print("interrupted", file=sys.stderr)
        sys.exit(INTERRUPTED)
    except SIGTERMException:  # raised by Lightning between batches, once last.ckpt is saved
        sys.exit(TERMINATED)
    return metrics.get("val/bleu")  # the value --multirun sweepers optimise


if __name__ == "__main__":
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    try:  # in one line where Hydra would print several
        launch = prepare_launch(sys.argv[1:], os.environ, gpu, CONFIGS)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    sys.argv[1:] = launch.argv
    run_with_hydra = hydra.main(version_base="1.3", config_path="configs", config_name="train")
    run_with_hydra(lambda cfg: main(cfg, launch.recipe))()
