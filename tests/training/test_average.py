"""``callbacks.keep_last`` keeps the last validations' weights; ``python -m seq2seq.training.average``
averages them into a checkpoint that every command opens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from seq2seq.export.__main__ import main as export_main
from seq2seq.formats.checkpoint import (
    KEY,
    CheckpointError,
    load_model,
    read_checkpoint,
    weights,
)
from seq2seq.launch.start import start_run
from seq2seq.serving import cli as serve_cli
from seq2seq.training.average import average, main
from seq2seq.training.module import EMA_PREFIX, MODEL_PREFIX
from tests.helpers.compose import ROOT, tiny_job

OLDEST = sorted((ROOT / "tests" / "fixtures").glob("checkpoint-*.ckpt"))[0]


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three epochs of the tiny experiment, a validation after each, keeping the last two."""
    tmp = tmp_path_factory.mktemp("kept")
    start_run(tiny_job(tmp / "run", tmp / "cache", "trainer.max_epochs=3", "callbacks.keep_last=2"))
    return tmp / "run" / "checkpoints"


def steps(checkpoints: Path) -> list[Path]:
    return sorted(checkpoints.glob("step-*.ckpt"), key=lambda path: int(path.stem.removeprefix("step-")))


@pytest.fixture(scope="module")
def averaged(kept: Path) -> Path:
    output = kept.parent / "avg.ckpt"
    assert main([*map(str, steps(kept)), "--output", str(output)]) == 0
    return output


def test_keep_last_keeps_the_weights_of_the_last_validations(kept: Path) -> None:
    last = read_checkpoint(kept / "last.ckpt")
    per_epoch = last["global_step"] // 3
    assert [path.name for path in steps(kept)] == [f"step-{2 * per_epoch}.ckpt", f"step-{3 * per_epoch}.ckpt"]
    newest = read_checkpoint(steps(kept)[-1])
    assert "optimizer_states" not in newest and newest[KEY]["weights_prefix"] == EMA_PREFIX
    for name, tensor in last["state_dict"].items():  # the last validation was the last step's
        torch.testing.assert_close(newest["state_dict"][name], tensor, rtol=0, atol=0)
    assert load_model(steps(kept)[0]).global_step == 2 * per_epoch


def test_it_averages_the_weights_translate_py_loads(kept: Path, averaged: Path) -> None:
    files = [read_checkpoint(path) for path in steps(kept)]
    result = read_checkpoint(averaged)
    assert result[KEY]["weights_prefix"] == MODEL_PREFIX and "best_bleu" not in result[KEY]
    assert result["global_step"] == files[-1]["global_step"]
    for name, tensor in weights(result).items():
        mean = (weights(files[0])[name] + weights(files[1])[name]) / 2  # the EMA weights
        torch.testing.assert_close(tensor, mean)
    assert not torch.equal(weights(files[0])["generator.weight"], weights(files[1])["generator.weight"])


def test_raw_averages_the_trained_weights(kept: Path) -> None:
    files = [read_checkpoint(path) for path in steps(kept)]
    result = average(steps(kept), raw=True)
    for name, tensor in weights(result).items():
        mean = (weights(files[0], MODEL_PREFIX)[name] + weights(files[1], MODEL_PREFIX)[name]) / 2
        torch.testing.assert_close(tensor, mean)


def test_every_command_opens_the_average(
    averaged: Path, tmp_path: Path, run_cli: Callable[..., tuple[int, list[str], str]]
) -> None:
    code, lines, err = run_cli("--ckpt", str(averaged), "--dtype", "float32", "I like coffee.", "Hi.")
    assert code == 0 and len(lines) == 2, err
    opened = serve_cli.load(serve_cli.build_parser().parse_args(["--ckpt", str(averaged), "--device", "cpu"]))
    assert "val BLEU unknown" in serve_cli.describe_model(opened.facts)
    assert export_main(["--ckpt", str(averaged), str(tmp_path / "ct2")]) == 0
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", f"init_from={averaged}", "trainer.max_steps=1"))
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


def test_checkpoints_of_another_model_or_tokenizer_are_refused_in_one_line(
    kept: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``checkpoint`` (conftest): the tiny model with a tokenizer of all 300 pairs, not the train split's."""
    ours = str(steps(kept)[-1])
    output = tmp_path / "avg.ckpt"
    for other, why in (
        (OLDEST, "do not share a model config (d_model 16 vs 32"),
        (checkpoint, "a tokenizer"),
    ):
        assert main([ours, str(other), "--output", str(output)]) == 1
        err = capsys.readouterr().err
        assert (
            err.count("\n") == 1
            and why in err
            and err.startswith("python -m seq2seq.training.average: error: ")
        )
    assert not output.exists()


def test_checkpoints_that_ship_different_weights_average_only_raw(kept: Path, averaged: Path) -> None:
    """A step file ships its EMA, the average its one set of weights."""
    with pytest.raises(CheckpointError, match=r"ship different weights .*: pass --raw"):
        average([steps(kept)[-1], averaged])
    assert (
        weights(average([steps(kept)[-1], averaged], raw=True)).keys()
        == weights(read_checkpoint(averaged)).keys()
    )


def test_one_checkpoint_gives_its_trained_weights_with_raw(kept: Path) -> None:
    """So a run's last trained weights can be translated and compared with the EMA it ships."""
    alone = weights(average([kept / "last.ckpt"], raw=True))
    for name, tensor in weights(read_checkpoint(kept / "last.ckpt"), MODEL_PREFIX).items():
        assert torch.equal(alone[name], tensor)


def test_an_output_is_replaced_only_with_force(
    kept: Path, averaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    output = tmp_path / "avg.ckpt"
    output.write_bytes(b"kept")
    argv = [*map(str, steps(kept)), "--output", str(output)]
    assert main(argv) == 2 and "exists; pass --force" in capsys.readouterr().err
    assert output.read_bytes() == b"kept"
    assert main([*argv, "--force"]) == 0
    assert read_checkpoint(output)["state_dict"].keys() == read_checkpoint(averaged)["state_dict"].keys()
