"""Sweeps with Hydra's own launchers and sweepers: a grid with the basic launcher (each job composed
and validated once), an Optuna search (``hparams_search``), and the SLURM launcher config
(composed only: no cluster here)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from seq2seq.config import validated_run
from seq2seq.launch.composing import CONFIG_NAME
from tests.helpers.compose import ROOT, compose_train
from tests.helpers.in_process import python

CALLS: list[tuple] = []  # what Recorder was told, in order


class Recorder(Callback):
    """A Hydra callback (``hydra.callbacks``) that notes each call of a sweep's, with the job's number
    and value."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        CALLS.append(("multirun_start", config.hydra.mode.name))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        CALLS.append(("job_start", config.hydra.job.num))

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        CALLS.append(("job_end", config.hydra.job.num, type(job_return.return_value).__name__))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        CALLS.append(("multirun_end",))


def sweep(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``train.py -m`` on the tiny experiment, a few steps per run, into ``tmp_path/sweep``."""
    return python(
        "train.py",
        "-m",
        *overrides,
        "experiment=tiny",
        "trainer.max_steps=4",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )


def run_configs(sweep_dir: Path) -> list[dict]:
    """The resolved config of each run of a sweep, in job order."""
    runs = sorted((path for path in sweep_dir.iterdir() if path.name.isdigit()), key=lambda p: int(p.name))
    return [OmegaConf.to_container(OmegaConf.load(run / "config.yaml")) for run in runs]


@pytest.mark.slow
def test_a_grid_sweep_trains_one_run_per_combination_with_the_basic_launcher(tmp_path: Path) -> None:
    result = sweep(tmp_path, "optim.lr=1e-3,2e-3", "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    runs = run_configs(tmp_path / "sweep")
    assert [(run["optim"]["lr"], run["seed"]) for run in runs] == [
        (0.001, 1),
        (0.001, 2),
        (0.002, 1),
        (0.002, 2),
    ]
    assert all((tmp_path / "sweep" / str(job) / "checkpoints" / "last.ckpt").is_file() for job in range(4))


@pytest.mark.slow
def test_train_py_composes_and_validates_each_job_of_a_sweep_once(tmp_path, monkeypatch) -> None:
    """A grid with Hydra's basic sweeper and launcher: the sweep's own config (``multirun.yaml``)
    composed once, each job composed once and validated once (every composition passes through
    Hydra's ``load_configuration``), then run as Hydra runs it: its number, its directory, its
    ``.hydra/`` files, the callbacks in Hydra's order, Hydra's lines on the console."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl  # private to Hydra: only counted here
    from hydra.types import RunMode

    from seq2seq.launch import composing, start

    counts = {"sweep": 0, "job": 0, "validated": 0}
    load, validate = ConfigLoaderImpl.load_configuration, validated_run

    def loaded(self, *args: Any, **kwargs: Any) -> DictConfig:
        counts["sweep" if kwargs["run_mode"] == RunMode.MULTIRUN else "job"] += 1
        return load(self, *args, **kwargs)

    def validated(*args: Any) -> Any:
        counts["validated"] += 1
        return validate(*args)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", loaded)
    for module in (composing, start):
        monkeypatch.setattr(module, "validated_run", validated)
    CALLS.clear()
    result = sweep(tmp_path, "optim.lr=1e-3,2e-3", f"+hydra.callbacks.record._target_={__name__}.Recorder")
    assert result.returncode == 0, result.stderr[-3000:]
    assert counts == {"sweep": 1, "job": 2, "validated": 2}
    assert CALLS == [
        ("multirun_start", "MULTIRUN"),
        ("job_start", 0),
        ("job_end", 0, "float"),  # val/bleu, what train.py's task returns
        ("job_start", 1),
        ("job_end", 1, "float"),
        ("multirun_end",),
    ]
    sweep_dir = tmp_path / "sweep"
    assert "optim.lr=1e-3,2e-3" in OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides.task
    for num, lr in enumerate([0.001, 0.002]):
        hydra_cfg = OmegaConf.load(sweep_dir / str(num) / ".hydra" / "hydra.yaml").hydra
        assert (hydra_cfg.job.num, hydra_cfg.job.id, hydra_cfg.mode) == (num, str(num), "MULTIRUN")
        assert hydra_cfg.runtime.output_dir == str(sweep_dir / str(num))
        assert OmegaConf.load(sweep_dir / str(num) / ".hydra" / "config.yaml").optim.lr == lr
        assert f"optim.lr={lr}" in OmegaConf.load(sweep_dir / str(num) / ".hydra" / "overrides.yaml")
        assert f"[HYDRA] \t#{num} : optim.lr={lr} experiment=tiny trainer.max_steps=4" in result.stdout
    assert "[HYDRA] Launching 2 jobs locally" in result.stdout


@pytest.mark.slow
def test_an_optuna_search_runs_its_trials_and_reports_the_best(tmp_path: Path) -> None:
    result = sweep(tmp_path, "hparams_search=lr_optuna", "hydra.sweeper.n_trials=2")
    assert result.returncode == 0, result.stderr[-3000:]
    runs = run_configs(tmp_path / "sweep")
    assert len(runs) == 2
    assert all(3e-4 <= run["optim"]["lr"] <= 3e-3 for run in runs)
    best = OmegaConf.load(tmp_path / "sweep" / "optimization_results.yaml")
    assert set(best.best_params) == {"optim.lr", "optim.warmup_steps", "optim.label_smoothing"}
    assert best.best_value >= 0  # val/bleu, the value train.py's main returns


@pytest.mark.slow
def test_submitit_runs_each_job_in_a_process_of_its_own(tmp_path: Path) -> None:
    """The submitit launcher on its local executor: the runs pickled, started and collected as on
    SLURM, where only the executor differs."""
    result = sweep(tmp_path, "hydra/launcher=submitit_local", "optim.lr=1e-3,2e-3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [run["optim"]["lr"] for run in run_configs(tmp_path / "sweep")] == [0.001, 0.002]
    assert len(list((tmp_path / "sweep" / ".submitit").glob("*/*_log.out"))) == 2


@pytest.mark.parametrize("launcher", ["slurm_gpu", "submitit_slurm"])
def test_the_slurm_launcher_composes(launcher: str) -> None:
    """``-m hydra/launcher=slurm_gpu`` (ours, one GPU per run) or the plugin's ``submitit_slurm``:
    composed, not run on a cluster."""
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(
            CONFIG_NAME,
            overrides=[f"hydra/launcher={launcher}", "hydra.launcher.partition=gpu"],
            return_hydra_config=True,
        )
    assert cfg.hydra.launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert cfg.hydra.launcher.partition == "gpu"
    if launcher == "slurm_gpu":
        assert (cfg.hydra.launcher.gpus_per_node, cfg.hydra.launcher.tasks_per_node) == (1, 1)
    assert compose_train().model == cfg.model  # the run itself is the same


def test_the_optuna_search_composes_with_its_sweeper() -> None:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(CONFIG_NAME, overrides=["hparams_search=lr_optuna"], return_hydra_config=True)
    assert cfg.hydra.sweeper._target_.endswith("OptunaSweeper")
    assert cfg.hydra.sweeper.direction == "maximize"
