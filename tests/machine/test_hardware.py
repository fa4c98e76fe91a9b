"""The precision rule with faked CPU flags, probe results and GPU capabilities, and its use in training."""

import itertools
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
import yaml

from seq2seq.config import DecodeConfig, ModelConfig, OptimConfig
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.inference.backends import open_model
from seq2seq.inference.cli import main as translate_main
from seq2seq.inference.translator import Translator
from seq2seq.launch.start import start_run
from seq2seq.machine import hardware
from seq2seq.machine.cpu_flags import parse_cpuinfo
from seq2seq.machine.hardware import (
    DeviceError,
    Hardware,
    bf16_speedup,
    choose_precision,
    compile_blocker,
    describe,
    device_type,
    precision_dtype,
    resolve_device,
    resolve_dtype,
    resolve_precision,
    speedup_of,
    threads_each,
)
from seq2seq.training.module import TranslationModule
from tests.helpers.compose import ROOT, compose_train, tiny_job
from tests.helpers.cpu_classes import CPU_CLASSES, fake_cpu

XEON = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.00GHz\nflags\t\t: fpu avx2 avx512f avx512bw\n"
TINY = ModelConfig(d_model=32, n_heads=2, n_encoder_layers=2, n_decoder_layers=2, d_ff=64)  # model=tiny


def machine(*flags: str, gpu: str | None = None, capability: tuple[int, int] | None = None) -> Hardware:
    return Hardware("Test CPU", frozenset(flags), 2, 2, torch.__version__, gpu, capability)


def probe_must_not_run() -> float:
    raise AssertionError("the probe ran although the flags or the GPU already decide")


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ((9, 0), "bf16-mixed"),
        ((8, 0), "bf16-mixed"),
        ((7, 5), "16-mixed"),
        ((7, 0), "16-mixed"),
        ((6, 1), "32-true"),
    ],
)
def test_cuda_precision_follows_the_compute_capability(capability, expected):
    hardware = machine("avx2", gpu="Some GPU", capability=capability)
    precision, reason = choose_precision("cuda", hardware, probe_must_not_run)
    assert precision == expected
    assert f"compute capability {capability[0]}.{capability[1]}" in reason


@pytest.mark.parametrize("flags", [(), ("avx2",), ("avx2", "avx512f"), ("avx512f", "amx_tile")])
def test_cpu_without_native_bf16_trains_in_fp32_without_probing(flags):
    precision, reason = choose_precision("cpu", machine(*flags), probe_must_not_run)
    assert precision == "32-true"
    assert reason == "Test CPU, 2 threads: no AVX512-BF16/AMX"


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16"])
@pytest.mark.parametrize(("speedup", "expected"), [(1.5, "bf16-mixed"), (0.9, "32-true"), (1.0, "32-true")])
def test_cpu_with_native_bf16_takes_bf16_only_when_the_probe_shows_it_faster(flag, speedup, expected):
    calls = []
    precision, reason = choose_precision("cpu", machine("avx2", flag), lambda: calls.append(1) or speedup)
    assert (precision, calls) == (expected, [1])
    assert f"{speedup:.2f}x fp32" in reason


def test_other_accelerators_get_fp32():
    assert choose_precision("mps", machine("avx512_bf16"), probe_must_not_run)[0] == "32-true"


@pytest.mark.parametrize("requested", ["32-true", "bf16-mixed", "16-mixed", "64-true", 32])
@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_an_explicit_precision_is_never_overridden(requested, device_type):
    assert resolve_precision(requested, TINY, device_type) == (requested, "set explicitly")


def test_auto_resolves_to_a_concrete_precision_on_this_machine():
    precision, reason = resolve_precision("auto", TINY, "cpu")
    assert precision in {"32-true", "bf16-mixed"} and reason


@pytest.mark.parametrize("cpu", sorted(CPU_CLASSES))
def test_inference_dtype_follows_the_same_rule_or_the_name_given(cpu, monkeypatch):
    fake_cpu(monkeypatch, cpu)
    assert resolve_dtype("bfloat16", TINY, "cpu") == (torch.bfloat16, "set explicitly")
    assert resolve_dtype("float16", TINY, "cuda")[0] == torch.float16
    assert resolve_dtype("auto", TINY, "cpu")[0] == CPU_CLASSES[cpu][3]
    assert [precision_dtype(p) for p in ("bf16-mixed", "16-mixed", "32-true", "bf16-true")] == [
        torch.bfloat16,
        torch.float16,
        torch.float32,
        torch.bfloat16,
    ]


def test_cpuinfo_gives_the_model_name_and_only_the_flags_that_matter():
    assert parse_cpuinfo(XEON) == ("Intel Xeon @ 2.00GHz", frozenset({"avx2", "avx512f"}))


def test_describe_names_cpu_flags_threads_torch_and_gpu():
    line = describe(machine("avx2", "avx512_bf16", gpu="NVIDIA H100", capability=(9, 0)))
    assert line.startswith("hardware: cpu Test CPU, flags avx2 avx512_bf16 (no avx512f amx_bf16 amx_tile)")
    assert "2 cores, 2 threads" in line and f"torch {torch.__version__}" in line
    assert line.endswith("gpu NVIDIA H100 (compute capability 9.0)")
    assert describe(machine()).endswith("gpu none")


def test_probe_measures_a_speedup():
    speedup = bf16_speedup(TINY, budget_s=0.5)
    assert math.isfinite(speedup) and speedup > 0


def test_probe_stops_before_its_budget_however_long_a_step_takes(monkeypatch):
    """A clock that moves 0.1 s at each reading: every step takes 0.2 s of it, on any machine."""
    readings = itertools.count(0.0, 0.1)
    monkeypatch.setattr(hardware, "time", SimpleNamespace(perf_counter=lambda: next(readings)))
    measured = {}

    def speedup_of(fp32: list[float], bf16: list[float]) -> float:
        measured.update(fp32=fp32, bf16=bf16)
        return 1.0

    monkeypatch.setattr(hardware, "speedup_of", speedup_of)
    bf16_speedup(TINY, budget_s=1.6)
    # The warm-up pair ends at 0.4 s, two more pairs at 1.4 s; a third would end at 1.8 s, past 1.6.
    assert len(measured["fp32"]) == len(measured["bf16"]) == 2  # past the warm-up
    assert next(readings) <= 1.6 + 0.1  # the reading after the last one the probe took


def test_probe_reads_the_machine_through_a_busy_neighbour():
    """Another process adds time to some repetitions, of either dtype: the answer must not flip."""
    fp32 = [0.010, 0.011, 0.030, 0.010, 0.025]
    bf16 = [0.002, 0.040, 0.035, 0.038, 0.002]  # 5x faster, but a neighbour hit three repetitions
    assert speedup_of(fp32, bf16) == pytest.approx(5.0)


def run_files(run: Path) -> tuple[str, dict]:
    """A finished run's config.yaml text and its TensorBoard hparams."""
    hparams = yaml.safe_load((run / "tensorboard" / "hparams.yaml").read_text())
    return (run / "config.yaml").read_text(), hparams


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory) -> Path:
    """The tiny experiment trained with an explicit bf16-mixed (emulated where the CPU lacks it)."""
    tmp_path = tmp_path_factory.mktemp("bf16")
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", "trainer.precision=bf16-mixed"))
    return tmp_path / "run"


@pytest.mark.parametrize("cpu", sorted(CPU_CLASSES))
def test_training_records_the_precision_auto_chose(tmp_path, monkeypatch, cpu):
    """The whole path a run takes on each class of CPU, whichever CPU runs the test."""
    fake_cpu(monkeypatch, cpu)
    overrides = ("trainer.precision=auto", "trainer.max_epochs=1")
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *overrides))
    config, hparams = run_files(tmp_path / "run")
    expected = CPU_CLASSES[cpu][2]
    assert yaml.safe_load(config)["trainer"]["precision"] == expected
    reason = "native bf16, 1.50x fp32 in the probe" if cpu == "bf16" else "no AVX512-BF16/AMX"
    assert config.startswith("# hardware: cpu ") and f"# precision: {expected} (" in config
    assert re.search(rf"\(faked: {cpu} CPU\), \d+ threads: {re.escape(reason)}\)", config)  # any core count
    assert hparams["precision"] == expected and hparams["hardware"].startswith("hardware: cpu ")


def test_compile_is_blocked_only_where_its_backend_cannot_build(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/g++" if name == "g++" else None)
    assert compile_blocker("cpu") is None
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert compile_blocker("cpu").startswith("no C++ compiler on PATH")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert compile_blocker("cuda").startswith("no Triton")


def test_a_run_asking_for_compile_without_a_compiler_trains_eager_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", "compile=true", "trainer.max_epochs=1"))
    config, _ = run_files(tmp_path / "run")
    assert yaml.safe_load(config)["compile"] is False  # config.yaml reproduces what ran
    assert "# compile: off (no C++ compiler on PATH" in config
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


def test_the_tiny_experiment_trains_in_fp32_on_every_machine():
    """Tests and CI train ``experiment=tiny``: its numerics must not depend on the CPU."""
    assert compose_train("experiment=tiny").trainer.precision == "32-true"


@pytest.mark.parametrize("cpu", sorted(CPU_CLASSES))
def test_translate_auto_decodes_in_the_dtype_of_the_cpu_and_says_so(checkpoint, monkeypatch, capsys, cpu):
    fake_cpu(monkeypatch, cpu)
    expected = CPU_CLASSES[cpu][3]
    assert open_model(checkpoint, device="cpu").translator.dtype == expected
    assert translate_main(["--ckpt", str(checkpoint), "--device", "cpu", "--eval", "test"]) == 0
    compute = "PyTorch float32 (" if cpu == "no-bf16" else "PyTorch bfloat16 ("
    assert f"compute = {compute}" in capsys.readouterr().out


def test_training_keeps_an_explicit_precision(bf16_run):
    config, hparams = run_files(bf16_run)
    assert yaml.safe_load(config)["trainer"]["precision"] == "bf16-mixed"
    assert "# precision: bf16-mixed (set explicitly)" in config
    assert hparams["precision"] == "bf16-mixed"


def test_validation_decodes_in_the_training_precision(tiny_data_cfg):
    """A bf16-mixed trainer's validation translations are the bf16 translator's, not the fp32 one's."""
    datamodule = TranslationDataModule(tiny_data_cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    vocab = datamodule.tokenizer.src_vocab_size
    pl.seed_everything(0)
    module = TranslationModule(
        TINY,
        OptimConfig(),
        DecodeConfig(),
        tiny_data_cfg,
        vocab,
        vocab,
        tokenizer=datamodule.tokenizer,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        precision="bf16-mixed",
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.validate(module, datamodule=datamodule)
    sources, _, hypotheses = module.val_samples
    assert sources

    def translate(dtype: torch.dtype) -> list[str]:
        translator = Translator(module.eval_model, datamodule.tokenizer, module.decode_cfg, dtype=dtype)
        return [best.text for best, *_ in translator.translate(sources)]

    assert hypotheses == translate(torch.bfloat16)
    assert hypotheses != translate(torch.float32)  # so the check above tells the two apart


def test_translator_runs_each_dtype_and_refuses_an_unknown_one(bf16_run, capsys):
    best = str(bf16_run / "checkpoints" / "best.ckpt")
    for dtype in ("auto", "float32", "bfloat16", "float16"):
        assert translate_main(["--ckpt", best, "--dtype", dtype, "I like coffee.", "Hello."]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 2
    assert translate_main(["--ckpt", best, "--dtype", "fp8", "Hello."]) == 2
    assert "argument --dtype: invalid choice: 'fp8'" in capsys.readouterr().err
    translator = open_model(best, device="cpu", dtype="bfloat16").translator
    assert translator.dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("environment", "expected"),
    [(None, "GOMP_SPINCOUNT = '0'"), ("ACTIVE", "OMP_WAIT_POLICY = 'ACTIVE'")],
)
def test_training_entry_point_sets_openmp_wait_policy_before_torch_loads(environment, expected):
    """libgomp prints the settings it read when torch loaded it (OMP_DISPLAY_ENV): no spinning at
    all (its default spins 300,000 times first), unless the user asked for a policy."""
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    # the tree first; a machine that keeps packages on PYTHONPATH keeps them reachable
    env.update(
        OMP_DISPLAY_ENV="VERBOSE",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    if environment:
        env["OMP_WAIT_POLICY"] = environment
    done = subprocess.run(
        [sys.executable, "train.py", "--help"], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert expected in done.stderr


@pytest.mark.parametrize(
    ("accelerator", "gpu", "expected"),
    [
        ("auto", True, "cuda"),
        ("auto", False, "cpu"),
        ("gpu", True, "cuda"),
        ("cpu", True, "cpu"),
        ("mps", False, "mps"),
    ],
)
def test_the_device_training_runs_on_decides_its_precision_rule(
    monkeypatch, accelerator, gpu, expected
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert device_type(accelerator) == expected


def test_auto_takes_the_gpu_when_there_is_one_and_an_absent_gpu_is_an_error(monkeypatch) -> None:
    for gpu, expected in ((True, "cuda"), (False, "cpu")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda gpu=gpu: gpu)
        assert resolve_device("auto") == torch.device(expected)
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(DeviceError, match="no CUDA GPU is available"):
        resolve_device("cuda")


def test_each_of_several_processes_gets_its_share_of_the_cores_and_at_least_one(monkeypatch):
    monkeypatch.setattr(hardware, "usable_cores", lambda: 16)
    assert (threads_each(1), threads_each(2), threads_each(12), threads_each(32)) == (16, 8, 1, 1)
