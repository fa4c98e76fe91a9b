"""End to end through the real Hydra config: train, validate with BLEU, checkpoint, resume, decode."""

from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.config import ConfigError, RunConfig
from seq2seq.formats.checkpoint import load_model, read_checkpoint
from seq2seq.inference.backends import open_model
from seq2seq.inference.cli import main as translate_main
from seq2seq.launch.start import start_run
from tests.helpers.compose import ddp_training, tiny_job
from tests.helpers.in_process import python


def tiny_config(tmp_path: Path, *overrides: str) -> RunConfig:
    return tiny_job(tmp_path / "run", tmp_path / "cache", *overrides)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("train")
    start_run(tiny_config(tmp_path, "logger.attention_images=true"))  # the tiny experiment leaves them out
    return tmp_path / "run"


def test_run_directory_holds_config_tokenizer_checkpoints_and_logs(trained_run):
    assert (trained_run / "config.yaml").is_file()
    assert (trained_run / "tokenizer.json").is_file()
    assert (trained_run / "checkpoints" / "best.ckpt").is_file()
    assert (trained_run / "checkpoints" / "last.ckpt").is_file()
    assert list((trained_run / "tensorboard").glob("events.out.tfevents.*"))


def test_tensorboard_has_scalars_text_and_attention_images(trained_run):
    events = EventAccumulator(str(trained_run / "tensorboard"), size_guidance={"images": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    for scalar in ("train/loss", "train/ppl", "train/acc", "train/lr", "train/tokens_per_s", "val/loss"):
        assert scalar in tags["scalars"], scalar
    for scalar in ("val/ppl", "val/bleu", "val/chrf", "hp/best_bleu"):
        assert scalar in tags["scalars"], scalar
    for scalar in ("data/train_pairs", "data/too_long_train_pairs", "data/too_long_train_share"):
        assert scalar in tags["scalars"], scalar
    assert "val/samples/text_summary" in tags["tensors"]
    assert {"attention/encoder_self", "attention/decoder_self", "attention/cross"} <= set(tags["images"])


def test_tensorboard_says_where_the_wall_time_went(trained_run):
    events = EventAccumulator(str(trained_run / "tensorboard"))
    events.Reload()
    steps = [e.value for e in events.Scalars("perf/train_step_share")]
    validation = [e.value for e in events.Scalars("perf/validation_share")]
    assert all(0 < share <= 1 for share in steps)
    assert validation[0] == 0 and 0 < validation[-1] < 1  # the tiny run validates after its first epoch
    assert steps[-1] + validation[-1] <= 1


def test_tensorboard_has_a_layer_by_head_grid_per_attention_kind(trained_run):
    events = EventAccumulator(str(trained_run / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    for kind in ("encoder_self", "decoder_self", "cross"):
        grids, singles = events.Images(f"attention/{kind}_grid"), events.Images(f"attention/{kind}")
        assert len(grids) == len(singles) >= 1  # one of each at every validation
        assert grids[-1].encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"


def test_checkpoint_is_self_contained_and_translates(trained_run):
    checkpoint = read_checkpoint(trained_run / "checkpoints" / "best.ckpt")
    assert {"model_config", "tokenizer", "decode_config", "data_config"} <= set(checkpoint["seq2seq"])
    translator = open_model(trained_run / "checkpoints" / "best.ckpt", device="cpu").translator
    outputs = [best.text for best, *_ in translator.translate(["How are you?", "I like coffee."])]
    assert len(outputs) == 2 and all(isinstance(o, str) for o in outputs)


def test_inference_loads_the_validated_moving_average_weights(trained_run):
    path = trained_run / "checkpoints" / "best.ckpt"
    state = read_checkpoint(path)["state_dict"]
    loaded = load_model(path).model.state_dict()
    name = "generator.weight"
    assert not torch.equal(state[f"model.{name}"], state[f"ema_model.{name}"])
    torch.testing.assert_close(loaded[name], state[f"ema_model.{name}"], rtol=0, atol=0)


def test_validation_bleu_equals_the_evaluation_command(trained_run, capsys):
    checkpoint = read_checkpoint(trained_run / "checkpoints" / "best.ckpt")
    logged = checkpoint["seq2seq"]["best_bleu"]
    assert translate_main(["--ckpt", str(trained_run / "checkpoints" / "best.ckpt"), "--eval", "valid"]) == 0
    printed = capsys.readouterr().out
    assert f"BLEU = {logged:.2f}" in printed or f"BLEU: {logged:.2f}" in printed, printed


def test_resume_continues_the_step_count(tmp_path):
    start_run(tiny_config(tmp_path, "trainer.max_epochs=1"))
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    steps_one_epoch = torch.load(last, weights_only=True)["global_step"]
    assert steps_one_epoch > 0
    start_run(tiny_config(tmp_path, "trainer.max_epochs=2", f"ckpt_path={last}"))
    assert torch.load(last, weights_only=True)["global_step"] == 2 * steps_one_epoch
    assert sorted(p.name for p in last.parent.iterdir()) == ["best.ckpt", "last.ckpt"]  # no best-v1.ckpt


@pytest.mark.parametrize(
    "variant",
    ["optim.optimizer=adamw", "optim.optimizer=muon", "model.qk_norm=true", "data.static_shapes=true"],
)
def test_a_resumed_run_ends_with_the_weights_of_one_that_ran_through(tmp_path, variant) -> None:
    """Each optimizer's state and each model variant's weights survive the checkpoint, and static
    batch shapes resume at the batch where the run stopped."""
    cache, steps = tmp_path / "cache", ("trainer.max_epochs=-1", "trainer.max_steps=8")
    start_run(tiny_job(tmp_path / "through", cache, variant, *steps))
    start_run(tiny_job(tmp_path / "resumed", cache, variant, "trainer.max_epochs=-1", "trainer.max_steps=4"))
    last = tmp_path / "resumed" / "checkpoints" / "last.ckpt"
    start_run(tiny_job(tmp_path / "resumed", cache, variant, *steps, f"ckpt_path={last}"))
    through, resumed = (
        torch.load(tmp_path / d / "checkpoints" / "last.ckpt") for d in ("through", "resumed")
    )
    assert resumed["global_step"] == through["global_step"] == 8
    for name, weight in through["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][name], weight, msg=name)
    translator = open_model(last, device="cpu").translator  # the checkpoint carries the variant
    assert translator.model.cfg.qk_norm == (variant == "model.qk_norm=true")
    assert all(isinstance(best.text, str) for best, *_ in translator.translate(["How are you?"]))


@pytest.mark.parametrize(
    ("override", "message"),
    [("model.d_model=33", r"model\.d_model"), ("decode.sampling=true", r"decode\.sampling=true would make")],
)
def test_invalid_override_fails_before_training(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        start_run(tiny_config(tmp_path, override))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.n_heads=3", "error: model.d_model (32) must be divisible by model.n_heads (3)"),
        ("data.path=no/such.tsv", "error: corpus file not found"),
        ("callbacks.early_stopping_patience=-1", "error: callbacks.early_stopping_patience must be >= 0"),
    ],
)
def test_cli_bad_input_prints_one_line_and_leaves_no_run_directory(tmp_path, override, message):
    run_dir = tmp_path / "run"
    result = python("train.py", "experiment=tiny", override, f"hydra.run.dir={run_dir}")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith(message)
    assert "Traceback" not in result.stderr
    assert not run_dir.exists()  # Hydra had created it; a run that never started leaves nothing


def test_logger_none_writes_no_tensorboard_files(tmp_path):
    start_run(tiny_config(tmp_path, "logger=none", "trainer.max_epochs=1"))
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "run" / "tensorboard").exists()


@pytest.mark.slow
def test_ddp_on_two_cpu_processes(tmp_path):
    result = ddp_training(tmp_path / "run", tmp_path / "cache", 2, "trainer.max_epochs=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_multirun_sweep_writes_one_run_directory_per_job(tmp_path):
    result = python(
        "train.py",
        "--multirun",
        "experiment=tiny",
        "trainer.max_epochs=1",
        "optim.lr=1e-3,3e-3",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for job, lr in enumerate(["0.001", "0.003"]):
        run = tmp_path / "sweep" / str(job)
        assert (run / "checkpoints" / "last.ckpt").is_file()
        assert f"lr: {lr}" in (run / "config.yaml").read_text()
