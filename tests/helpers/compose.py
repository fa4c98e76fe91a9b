"""The real Hydra config composed exactly as ``train.py`` does it, shipped config files, and
``train.py`` started as DDP processes or in-process, for tests."""

import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from seq2seq.config import DataConfig, ModelConfig, RunConfig, validated, validated_run
from seq2seq.launch.composing import compose_run
from seq2seq.launch.start import start_run

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def compose_train(*overrides: str) -> DictConfig:
    return compose_run(CONFIGS, list(overrides))


def tiny_run(run_dir: Path, cache_dir: Path, *overrides: str) -> DictConfig:
    """The seconds-long ``tiny`` experiment writing into ``run_dir``."""
    return compose_train(
        "experiment=tiny", f"output_dir={run_dir}", f"data.cache_dir={cache_dir}", *overrides
    )


def tiny_job(run_dir: Path, cache_dir: Path, *overrides: str) -> RunConfig:
    """:func:`tiny_run` validated, as ``train.py`` plans it (``start_run`` takes it)."""
    return validated_run(tiny_run(run_dir, cache_dir, *overrides))


def model_config(name: str) -> ModelConfig:
    """The sizes of ``configs/model/<name>.yaml``, validated like training validates them."""
    return validated(ModelConfig, OmegaConf.load(CONFIGS / "model" / f"{name}.yaml"), "model")


def data_config(name: str) -> DataConfig:
    """The corpus of ``configs/data/<name>.yaml`` and its settings, validated like training's."""
    return validated(DataConfig, OmegaConf.load(CONFIGS / "data" / f"{name}.yaml"), "data")


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


STOP_AT = 3  # optimizer steps per rank before a resume test's checkpoint, inside the first epoch


def run_training(tmp_path: Path, processes: int, *overrides: str) -> None:
    """The tiny experiment into ``tmp_path/run``: in this process for 1, else as DDP processes;
    the resume tests of the in-memory and the streamed data train with it."""
    overrides = (*overrides, "logger=none")
    if processes == 1:
        start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *overrides))
        return
    result = ddp_training(tmp_path / "run", tmp_path / "cache", processes, *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
