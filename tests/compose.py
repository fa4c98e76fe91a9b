"""The real Hydra config composed exactly as ``train.py`` does it, shipped config files, and
``train.py`` started as DDP processes, for tests."""

import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from seq2seq.config import ModelConfig, validated

ROOT = Path(__file__).resolve().parents[1]


def compose_train(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def tiny_run(run_dir: Path, cache_dir: Path, *overrides: str) -> DictConfig:
    """The seconds-long ``tiny`` experiment writing into ``run_dir``."""
    return compose_train(
        "experiment=tiny", f"output_dir={run_dir}", f"data.cache_dir={cache_dir}", *overrides
    )


def model_config(name: str) -> ModelConfig:
    """The sizes of ``configs/model/<name>.yaml``, validated like training validates them."""
    return validated(ModelConfig, OmegaConf.load(ROOT / "configs" / "model" / f"{name}.yaml"), "model")


def ddp_training(
    run_dir: Path, cache_dir: Path, processes: int, *overrides: str
) -> subprocess.CompletedProcess:
    """``train.py`` on ``processes`` CPU processes (gloo) started by Lightning's launcher; the tiny
    experiment, output captured. The caller checks the return code."""
    return subprocess.run(
        [
            sys.executable,
            "train.py",
            "experiment=tiny",
            "trainer=ddp",
            "trainer.accelerator=cpu",
            f"trainer.devices={processes}",
            f"data.cache_dir={cache_dir}",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
