"""translate.py --model: an exported model behind every mode of the command line."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import ctranslate2
import pytest

from seq2seq.inference.cli import main

SENTENCES = ["How are you?", "I like coffee.", "Where is the station?"]


@pytest.fixture
def exported(ct2_export: Path) -> Path:
    """The trained checkpoint exported with float32 weights: the same tokens as the checkpoint."""
    return ct2_export


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(["--device", "cpu", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "mode",
    [
        [*SENTENCES],
        ["--beam", "5", "--nbest", "3", *SENTENCES],
        ["--greedy", "--max-len", "4", *SENTENCES],
        ["--beam", "5", "--eval", "test"],
    ],
    ids=["sentences", "nbest", "max-len", "eval"],
)
def test_model_prints_what_the_checkpoint_prints(
    trained_ckpt: Path, exported: Path, capsys, mode: list[str]
) -> None:
    code, expected, _ = _run(capsys, "--ckpt", str(trained_ckpt), "--dtype", "float32", *mode)
    assert code == 0 and expected
    code, got, err = _run(capsys, "--model", str(exported), *mode)
    assert code == 0, err
    if "--nbest" in mode:  # scores differ in the 4th decimal (see ct2_translator), texts and order do not
        got, expected = ([line.split("\t")[::2] for line in text.splitlines()] for text in (got, expected))
    if "--eval" in mode:  # the same scores; the last line says what each side computed in
        *got, got_compute = got.splitlines()
        *expected, expected_compute = expected.splitlines()
        assert expected_compute == "compute = PyTorch float32 (set explicitly)"
        assert got_compute == "compute = CTranslate2 float32 (the export's weight type)"
    assert got == expected


@pytest.mark.parametrize("interactive", [False, True])
def test_stdin_and_interactive_keep_blank_lines(
    trained_ckpt: Path, exported: Path, capsys, monkeypatch, interactive: bool
) -> None:
    outputs = []
    for model in (["--ckpt", str(trained_ckpt), "--dtype", "float32"], ["--model", str(exported)]):
        monkeypatch.setattr(sys, "stdin", io.StringIO("How are you?\n\n  \nI like coffee.\n"))
        code, out, _ = _run(capsys, *model, *(["--interactive"] if interactive else []))
        assert code == 0
        outputs.append(out)
    assert outputs[0] == outputs[1]
    lines = outputs[1].split("\n")
    assert len(lines) == 5 and lines[1] == lines[2] == lines[4] == "" and lines[0] and lines[3]


def test_seeded_sampling_repeats_through_the_cli(exported: Path, capsys) -> None:
    argv = ["--model", str(exported), "--sample", "--temperature", "1.5", "--top-p", "0.9", *SENTENCES * 3]
    runs = [_run(capsys, *argv, "--seed", seed)[1] for seed in ("1", "1", "2")]
    assert runs[0] == runs[1] != runs[2]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--model", "{model}", "--show-attention", "Hi."], 2, "need --ckpt"),
        (["--model", "{model}", "--ckpt", "{ckpt}", "Hi."], 2, "not allowed with argument"),
        (["--model", "nowhere", "Hi."], 1, "exported model not found"),
        (["--model", "{ckpt_dir}", "Hi."], 1, "is not a seq2seq export"),
        (["Hi."], 2, "one of the arguments --ckpt --model is required"),
    ],
)
def test_errors_are_one_line(trained_ckpt: Path, exported: Path, capsys, argv, code, message) -> None:
    values = {"{model}": str(exported), "{ckpt}": str(trained_ckpt), "{ckpt_dir}": str(trained_ckpt.parent)}
    returned, out, err = _run(capsys, *[values.get(arg, arg) for arg in argv])
    assert (returned, out) == (code, "")
    assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.skipif(ctranslate2.get_cuda_device_count() > 0, reason="CTranslate2 sees a GPU here")
def test_cuda_that_ctranslate2_cannot_see_is_one_line(exported: Path, capsys) -> None:
    code, out, err = _run(capsys, "--model", str(exported), "--device", "cuda", "Hi.")
    assert (code, out) == (1, "")
    assert err == (
        "translate.py: error: device 'cuda' requested but CTranslate2 sees no CUDA GPU; use 'cpu' or 'auto'\n"
    )


@pytest.mark.skipif(ctranslate2.get_cuda_device_count() > 0, reason="CTranslate2 sees a GPU here")
def test_a_gpu_that_ctranslate2_cannot_run_on_leaves_auto_on_the_cpu(
    exported: Path, capsys, caplog, monkeypatch
) -> None:
    """A driver that shows a GPU whose CUDA libraries CTranslate2 cannot load (here the count says 1
    on a machine without one): auto translates as --device cpu does, with a warning; cuda stops in one
    line."""
    _, on_cpu, _ = _run(capsys, "--model", str(exported), *SENTENCES)
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 1)
    code, out, _ = _run(capsys, "--model", str(exported), "--device", "auto", *SENTENCES)
    assert (code, out) == (0, on_cpu)
    assert "CTranslate2 cannot run on this GPU" in caplog.text and "decoding on the CPU" in caplog.text
    code, out, err = _run(capsys, "--model", str(exported), "--device", "cuda", "Hi.")
    assert (code, out) == (1, "")
    assert err.startswith("translate.py: error: device 'cuda': CTranslate2 cannot run on this GPU (")
    assert len(err.strip().splitlines()) == 1, err
