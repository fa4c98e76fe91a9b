"""``train.py``'s command line: the experiment it adds from the hardware (and where Hydra accepts
it, whatever flags stand where), one line for a bad override, ``--help``, and the GPU recipe's
schedule and validation cadence as Lightning will run them (checked on a CPU)."""

from __future__ import annotations

import logging
import re
import subprocess
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf

from seq2seq.config import CallbacksConfig, ConfigError, OptimConfig, validated, validated_run
from seq2seq.launch.command_line import hydra_args, job_overrides
from seq2seq.launch.composing import Composed, compose_jobs
from seq2seq.launch.plan import Plan, plan_launch
from seq2seq.launch.recipe import choose_recipe
from seq2seq.launch.start import start_run
from tests.helpers.compose import CONFIGS, compose_train, tiny_run
from tests.helpers.in_process import python
from tests.helpers.step_clock import step_clock

CPU_SETS = (
    "model=small, trainer=default, data.max_tokens=2500, optim.lr=0.0015, optim.warmup_steps=200, "
    "optim.ema_decay=0.995, optim.schedule=wsd, optim.dropout_min_epochs=10, "
    "trainer.max_time=00:00:30:00, trainer.max_epochs=-1, trainer.val_check_interval=0.5"
)


def check_overrides(argv: list[str], config_dir: Path) -> list[Composed]:
    """What ``train.py`` plans: every job composed and (where it trains) validated, once."""
    args = hydra_args(argv)
    jobs = job_overrides(args.overrides, args.multirun)
    return compose_jobs(config_dir, jobs, validate=args.cfg is None and args.info is None)


def train_py(*argv: str) -> subprocess.CompletedProcess:
    return python("train.py", *argv)


def test_no_gpu_gets_the_cpu_recipe_and_the_line_says_what_it_set() -> None:
    argv, line = choose_recipe(["trainer.max_time=00:00:01:00"], None, CONFIGS)
    assert argv == ["experiment=spa_en_cpu", "trainer.max_time=00:00:01:00"]  # the user's value wins
    assert (
        line
        == f"recipe: added experiment=spa_en_cpu (no CUDA GPU; experiment=spa_en_gpu needs one): {CPU_SETS}"
    )


def test_a_gpu_gets_the_gpu_recipe_and_is_told_how_to_choose_the_other() -> None:
    overrides, line = choose_recipe(["seed=1,2"], "NVIDIA H100 80GB HBM3", CONFIGS)
    assert overrides == ["experiment=spa_en_gpu", "seed=1,2"]
    assert line.startswith(
        "recipe: added experiment=spa_en_gpu (CUDA GPU: NVIDIA H100 80GB HBM3; experiment=spa_en_cpu "
        "trains the CPU recipe): model=base, trainer=gpu, data.max_tokens=16384,"
    )


@pytest.mark.parametrize("named", ["experiment=tiny", "+experiment=tiny", "experiment=spa_en_cpu"])
def test_a_named_experiment_always_wins(named: str) -> None:
    for gpu in (None, "NVIDIA H100 80GB HBM3"):
        assert choose_recipe([named, "seed=1"], gpu, CONFIGS)[0] == [named, "seed=1"]


@pytest.mark.parametrize(
    "argv",
    [
        ["model=base", "--cfg", "job"],
        ["--cfg", "job", "model=base"],
        ["-c", "job", "model=base", "seed=1"],
        ["--info"],
        ["--info", "defaults", "model=base"],
        ["model=base", "--info", "defaults"],
    ],
)
def test_hydra_is_told_the_recipe_before_the_overrides_whatever_flags_stand_where(argv: list[str]) -> None:
    """The plan gives Hydra the recipe first, then the command line's overrides, which win."""
    plan = plan_launch(argv, {}, None, CONFIGS)
    assert plan.overrides == ["experiment=spa_en_cpu", *hydra_args(argv).overrides]
    assert plan.job is None  # prints, trains nothing


@pytest.mark.parametrize("argv", [["--help"], ["--hydra-help"], ["-cn", "other", "seed=1"]])
def test_what_hydra_answers_alone_gets_the_command_line_as_typed(argv: list[str]) -> None:
    plan = plan_launch(argv, {}, None, CONFIGS)
    assert (plan.overrides, plan.recipe, plan.job) == (hydra_args(argv).overrides, "", None)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["-h"],
        ["--hydra-help"],
        ["--cfg", "job", "model=base"],
        ["-c", "all", "--resolve", "-p", "model"],
        ["model=base", "seed=1", "--cfg", "hydra"],
        ["-m", "optim.lr=1e-3,2e-3", "+experiment=tiny", "~seed"],
        ["--multirun", "hydra/launcher=submitit_local"],
        ["-r", "hydra.run.dir=/tmp/run"],
        ["--info"],
        ["-i", "defaults-tree", "model=base"],
        ["model=base", "--info", "plugins"],
        ["-cp", "elsewhere", "-cn", "other", "seed=1"],
        ["--config-dir", "/tmp/configs", "seed=1"],
        ["-sc", "install=bash"],
        ["--experimental-rerun", "run/.hydra/config.pickle"],
    ],
)
def test_our_reading_of_the_command_line_is_hydras(argv: list[str]) -> None:
    """``hydra_args`` reads ``argv`` as ``@hydra.main``'s own parser does (private to Hydra: the
    product does not import it)."""
    from hydra._internal.utils import get_args_parser

    assert vars(hydra_args(argv)) == vars(get_args_parser().parse_args(argv))


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["model=base", "--cfg", "job"], ["--cfg", "job", "model=base"]])
def test_train_py_prints_the_base_model_whichever_side_the_flags_are(argv: list[str]) -> None:
    result = train_py(*argv)
    assert result.returncode == 0, result.stderr
    model = OmegaConf.create(result.stdout).model
    assert (model.d_model, model.activation, model.d_ff, model.norm_first) == (512, "relu", 2048, False)
    budget = "00:00:15:00" if torch.cuda.is_available() else "00:00:30:00"  # spa_en_gpu or spa_en_cpu
    assert OmegaConf.create(result.stdout).trainer.max_time == budget


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("model.d_modle=128", "model.d_modle is not a config key; did you mean model.d_model?"),
        ("trainer.max_epoch=3", "trainer.max_epoch is not a config key; did you mean trainer.max_epochs?"),
        ("model.zzz=1", "model.zzz is not a config key; model has activation, attention_dropout, d_ff,"),
        (
            "trainer.gradient_clip_algorithm=norm",
            "trainer.gradient_clip_algorithm is a Lightning Trainer argument that configs/trainer/ does not "
            "set: add it with +trainer.gradient_clip_algorithm=...",
        ),
        (
            "model.d_model=abc",
            "model.d_model=abc: Value 'abc' of type 'str' could not be converted to Integer",
        ),
        ("compile=maybe", "compile=maybe: Value 'maybe' is not a valid bool"),
        ("model.dropout=1.5", "model.dropout must be in [0, 1), got 1.5"),
        ("trainer.max_time=01:00:00", "trainer.max_time must be DD:HH:MM:SS"),
        (
            "model=bsae",
            "model=bsae is not an option (did you mean base?); "
            "model is one of base, small, small_postnorm, tiny",
        ),
        ("decode=bem", "decode=bem is not an option (did you mean beam?); decode is one of beam, greedy"),
    ],
)
def test_a_bad_override_gets_one_line_naming_the_key(override: str, line: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_overrides(["experiment=tiny", override], CONFIGS)  # a bad key, option or type: before Hydra
        validated_run(compose_train("experiment=tiny", override))  # a broken rule: the run's one validation
    assert str(err.value).startswith(line)
    assert "\n" not in str(err.value)


def test_every_job_of_a_sweep_is_checked(tmp_path: Path) -> None:
    """Its keys, options and rules before Hydra runs: a grid's jobs each composed once, in the order
    Hydra's basic sweeper runs them; with a launcher plugin, which composes its own, each value."""

    def plan(*overrides: str) -> Plan:
        argv = ["-m", "experiment=tiny", *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
        return plan_launch(argv, {}, None, CONFIGS)

    sweep = plan("optim.lr=1e-3,2e-3", "model=tiny,small").sweep
    assert sweep is not None
    jobs = [(job.run.optim.lr, job.config.hydra.runtime.choices.model) for job in sweep.jobs]
    assert jobs == [(0.001, "tiny"), (0.001, "small"), (0.002, "tiny"), (0.002, "small")]
    assert plan("hydra/launcher=submitit_local", "optim.lr=1e-3,2e-3").sweep is None  # Hydra's multirun
    for launcher in ([], ["hydra/launcher=submitit_local"]):
        with pytest.raises(ConfigError, match=r"^optim\.lr must be > 0, got -0\.001$"):
            plan(*launcher, "optim.lr=1e-3,-1e-3", "model=tiny,small")
        with pytest.raises(ConfigError, match="model=smal is not an option"):
            plan(*launcher, "optim.lr=1e-3,2e-3", "model=tiny,smal")
    with pytest.raises(ConfigError, match=r"^optim\.lr=interval\(1e-4,1e-3\): the basic sweeper takes lists"):
        plan("optim.lr=interval(1e-4,1e-3)")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.slow
def test_train_py_refuses_a_sweep_with_a_bad_value_before_its_first_job(tmp_path: Path) -> None:
    """``train.py`` checks every value before Hydra starts a job or makes a directory."""
    result = train_py("-m", "experiment=tiny", "optim.lr=1e-3,-1e-3", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["error: optim.lr must be > 0, got -0.001"]
    assert not (tmp_path / "sweep").exists()


def test_printing_the_config_checks_keys_but_not_the_rules() -> None:
    """``--cfg job`` shows a config that would not train, and still refuses an unknown key."""
    check_overrides(["--cfg", "job", "experiment=tiny", "decode.sampling=true"], CONFIGS)
    with pytest.raises(ConfigError, match=r"did you mean decode\.sampling"):
        check_overrides(["--cfg", "job", "experiment=tiny", "decode.samplin=true"], CONFIGS)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "first_line"),
    [
        ("model.d_modle=128", "error: model.d_modle is not a config key; did you mean model.d_model?"),
        ("model.d_model=abc", "error: model.d_model=abc: Value 'abc' of type 'str' could not be converted"),
        ("model.dropout=1.5", "error: model.dropout must be in [0, 1), got 1.5"),
        ("model=bsae", "error: model=bsae is not an option (did you mean base?); model is one of base,"),
    ],
)
def test_train_py_says_what_is_wrong_in_its_first_line_and_leaves_no_run_directory(
    tmp_path: Path, override: str, first_line: str
) -> None:
    result = train_py(override, f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode != 0
    assert result.stderr.splitlines()[0].startswith(first_line), result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_help_lists_the_groups_their_options_the_experiments_and_five_keys() -> None:
    result = train_py("--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for group in sorted(path for path in CONFIGS.iterdir() if path.is_dir() and path.name != "hydra"):
        assert re.search(rf"^{group.name} +\S", text, re.MULTILINE), f"no line on the group {group.name}"
        options = ", ".join(sorted(option.stem for option in group.glob("*.yaml")))
        assert f"{group.name}: {options}" in text
    for experiment in sorted((CONFIGS / "experiment").glob("*.yaml")):
        assert re.search(rf"^{experiment.stem} +\S", text, re.MULTILINE), f"no line on {experiment.stem}"
    keys = re.findall(r"^(\S+=\S+) ", text.split("== Five keys to change first ==")[1], re.MULTILINE)
    assert len(keys) == 5
    compose_train(*keys)  # each works as shown


def test_the_gpu_recipe_decays_with_its_time_budget_and_validates_on_the_clock() -> None:
    cfg = compose_train("experiment=spa_en_gpu", "trainer.accelerator=cpu", "trainer.precision=32-true")
    optim = validated(OptimConfig, cfg.optim, "optim")
    assert (optim.schedule, optim.dropout_min_epochs) == ("wsd", 10)
    assert cfg.trainer.max_time == "00:00:15:00"
    trainer = pl.Trainer(**OmegaConf.to_container(cfg.trainer), logger=False, enable_checkpointing=False)
    assert trainer._val_check_time_interval == 90.0  # seconds between validations, not epochs


def test_a_run_validating_on_the_clock_trains_with_early_stopping_on(tmp_path, caplog, monkeypatch) -> None:
    """The GPU recipe validates on the clock with early stopping at its default patience; that pair
    once died in Lightning's EarlyStopping setup. Here on a CPU, with a clock that the steps drive
    (a second a step) and a validation every 3 seconds: every third step, on any machine."""
    gpu = compose_train("experiment=spa_en_gpu").trainer
    assert isinstance(gpu.val_check_interval, str) and gpu.check_val_every_n_epoch is None
    caplog.set_level(logging.INFO, logger="seq2seq.training.progress_log")
    step_clock(monkeypatch, 1.0)
    patience = CallbacksConfig.early_stopping_patience
    cfg = tiny_run(
        tmp_path / "run", tmp_path / "cache", "trainer.val_check_interval=00:00:00:03",
        "trainer.check_val_every_n_epoch=null", f"callbacks.early_stopping_patience={patience}",
    )  # fmt: skip
    start_run(validated_run(cfg))
    steps = [int(step) for step in re.findall(r"validation at step (\d+):", caplog.text)]
    assert steps[:3] == [3, 6, 9] and all(step % 3 == 0 for step in steps[:-1]), steps
    assert (tmp_path / "run" / "checkpoints" / "best.ckpt").is_file()  # validated, checkpointed by val/bleu


def test_train_py_composes_and_validates_a_run_once_and_hydra_writes_its_files(tmp_path, monkeypatch) -> None:
    """From the command line to ``trainer.fit`` the run's config is composed once (by us or by Hydra:
    every composition passes through Hydra's ``compose_config``) and validated once; ``.hydra/``
    and the log are Hydra's as before."""
    from hydra._internal.hydra import Hydra  # private to Hydra: only counted here

    from seq2seq.launch import composing, start

    counts = {"composed": 0, "validated": 0}

    def counted(name: str, function):
        def call(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(Hydra, "compose_config", counted("composed", Hydra.compose_config))
    for module in (composing, start):
        monkeypatch.setattr(module, "validated_run", counted("validated", validated_run))
    run_dir = tmp_path / "run"
    overrides = ["experiment=tiny", "trainer.max_steps=2", f"data.cache_dir={tmp_path / 'cache'}"]
    result = train_py(*overrides, f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert counts == {"composed": 1, "validated": 1}
    assert OmegaConf.load(run_dir / ".hydra" / "overrides.yaml") == overrides  # the task's
    assert OmegaConf.load(run_dir / ".hydra" / "config.yaml").trainer.max_steps == 2
    hydra_cfg = OmegaConf.load(run_dir / ".hydra" / "hydra.yaml").hydra
    assert (hydra_cfg.runtime.output_dir, hydra_cfg.job.name) == (str(run_dir), "train")
    assert "hydra.mode=RUN" in hydra_cfg.overrides.hydra
    assert "recipe: the experiment given on the command line" in (run_dir / "train.log").read_text()
    assert (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints" / "last.ckpt").is_file()
