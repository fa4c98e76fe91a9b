"""``python train.py`` picks the experiment from the hardware unless one is named, and the GPU
recipe's schedule and validation cadence are what Lightning will run (checked on a CPU)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import pytorch_lightning as pl
import torch
from compose import ROOT, compose_train
from omegaconf import OmegaConf

from seq2seq.config import OptimConfig, validated
from seq2seq.recipe import choose_recipe


def test_no_gpu_gets_the_cpu_recipe() -> None:
    argv, line = choose_recipe(["trainer.max_time=00:00:01:00"], gpu=None)
    assert argv == ["trainer.max_time=00:00:01:00", "experiment=spa_en_cpu"]
    assert line == "recipe: spa_en_cpu (no CUDA GPU); experiment=spa_en_gpu needs one"


def test_a_gpu_gets_the_gpu_recipe_and_is_told_how_to_choose_the_other() -> None:
    argv, line = choose_recipe(["--multirun", "seed=1,2"], gpu="NVIDIA H100 80GB HBM3")
    assert argv == ["--multirun", "seed=1,2", "experiment=spa_en_gpu"]
    assert (
        line
        == "recipe: spa_en_gpu (CUDA GPU: NVIDIA H100 80GB HBM3); experiment=spa_en_cpu trains the CPU recipe"
    )


@pytest.mark.parametrize("named", ["experiment=tiny", "+experiment=tiny", "experiment=spa_en_cpu"])
def test_a_named_experiment_always_wins(named) -> None:
    for gpu in (None, "NVIDIA H100 80GB HBM3"):
        assert choose_recipe([named], gpu)[0] == [named]


def test_the_gpu_recipe_decays_with_its_time_budget_and_validates_on_the_clock() -> None:
    cfg = compose_train("experiment=spa_en_gpu", "trainer.accelerator=cpu", "trainer.precision=32-true")
    optim = validated(OptimConfig, cfg.optim, "optim")
    assert (optim.schedule, optim.dropout_min_epochs) == ("wsd", 10)
    assert cfg.trainer.max_time == "00:00:15:00"
    trainer = pl.Trainer(**OmegaConf.to_container(cfg.trainer), logger=False, enable_checkpointing=False)
    assert trainer._val_check_time_interval == 90.0  # seconds between validations, not epochs


def test_train_py_without_an_experiment_composes_the_hardware_recipe() -> None:
    result = subprocess.run(
        [sys.executable, "train.py", "--cfg", "job"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    budget = "00:00:15:00" if torch.cuda.is_available() else "00:00:30:00"  # spa_en_gpu or spa_en_cpu
    assert f"max_time: {budget}" in result.stdout
