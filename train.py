"""Train a translation model: ``python train.py [hydra overrides]``."""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import seq2seq.threads  # noqa: F401  (first of ours, and nothing above loads torch: see its docstring)
from seq2seq.config import ConfigError, DataError
from seq2seq.training.checkpoint import CheckpointError
from seq2seq.training.module import NonFiniteLossError
from seq2seq.training.run import discard_unstarted_run, train


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Run training; expected failures print one line and exit non-zero instead of a traceback."""
    try:
        metrics = train(cfg)
    except (ConfigError, DataError) as err:  # found before training: nothing worth keeping
        discard_unstarted_run(Path(cfg.output_dir))
        sys.exit(f"error: {err}")
    except (CheckpointError, NonFiniteLossError) as err:
        sys.exit(f"error: {err}")
    except KeyboardInterrupt:  # before training started; once it runs, Lightning saves and exits
        sys.exit("interrupted")
    return metrics.get("val/bleu")  # the value --multirun sweepers optimise


if __name__ == "__main__":
    main()
