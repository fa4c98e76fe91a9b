"""The translate.py command line on a real tiny checkpoint: modes, output files and one-line errors."""

from __future__ import annotations

import io
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from seq2seq.config import ModelConfig
from seq2seq.inference import cli
from seq2seq.inference import translator as translate_module
from seq2seq.inference.cli import main
from seq2seq.inference.translator import Translator
from seq2seq.model import Transformer
from seq2seq.training.module import MODEL_PREFIX
from tests.helpers.compose import ROOT
from tests.helpers.in_process import python
from tests.helpers.tiny import CORPUS, tiny_tokenizer


def best_texts(translator: Translator, texts: list[str], decode_cfg=None) -> list[str]:
    return [best.text for best, *_ in translator.translate(texts, decode_cfg)]


def test_sentences_on_the_command_line(checkpoint: Path, translator: Translator, run_cli) -> None:
    code, lines, _ = run_cli(
        "--ckpt", str(checkpoint), "--device", "cpu", "--dtype", "float32", "How are you?", "I like coffee."
    )
    assert code == 0
    assert lines == best_texts(translator, ["How are you?", "I like coffee."])
    assert all(lines)


def test_stdin_keeps_blank_lines_aligned(
    checkpoint: Path, translator: Translator, run_cli, monkeypatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("How are you?\n\n   \nI like coffee.\n"))
    code, lines, err = run_cli("--ckpt", str(checkpoint), "--device", "cpu", "--dtype", "float32")
    assert code == 0
    first, last = best_texts(translator, ["How are you?", "I like coffee."])
    assert lines == [first, "", "", last]
    assert err == ""


def test_subprocess_reads_a_file_on_stdin(checkpoint: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("Good morning.\n\nThank you.\n", encoding="utf-8")
    with source.open() as stdin:
        result = subprocess.run(
            [sys.executable, str(ROOT / "translate.py"), "--ckpt", str(checkpoint), "--device", "cpu"],
            stdin=stdin,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[0] and lines[1] == "" and lines[2]
    assert "Traceback" not in result.stderr


def test_nbest_prints_sorted_scored_hypotheses(checkpoint: Path, run_cli) -> None:
    code, lines, _ = run_cli(
        "--ckpt", str(checkpoint), "--device", "cpu", "--beam", "3", "--nbest", "3", "Hi.", "Go."
    )
    assert code == 0
    rows = [line.split("\t") for line in lines]
    assert [int(row[0]) for row in rows] == [0, 0, 0, 1, 1, 1]
    for index in (0, 1):
        scores = [float(row[1]) for row in rows if int(row[0]) == index]
        assert scores == sorted(scores, reverse=True)


def test_attention_table_and_heatmap(checkpoint: Path, tmp_path: Path, run_cli) -> None:
    png = tmp_path / "att.png"
    argv = ["--ckpt", str(checkpoint), "--device", "cpu", "--show-attention", "--attention-png", str(png)]
    code, lines, _ = run_cli(*argv, "I like coffee.")
    assert code == 0
    assert "</s>" in lines[1] and " | " in lines[1]  # header row: source pieces, EOS last
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--ckpt", "missing.ckpt", "Hi."], 1, "checkpoint not found"),
        (["--ckpt", "{ckpt}", "--beam", "0", "Hi."], 2, "--beam must be positive"),
        (["--ckpt", "{ckpt}", "--no-such-flag"], 2, "unrecognized arguments"),
        (["--ckpt", "{ckpt}", "--greedy", "--nbest", "2", "Hi."], 1, "decode.nbest"),
        (["--ckpt", "{ckpt}", "--eval", "nowhere.tsv"], 1, "nowhere.tsv"),
        (["--ckpt", "{ckpt}", "--eval", "{root}/tests/fixtures/broken.tsv"], 1, "codec can't decode"),
        (["--ckpt", "{ckpt}", "-o", "{tmp}/no/such/dir/out.txt", "Hi."], 1, "such/dir does not exist"),
    ],
)
def test_errors_are_one_line_without_traceback(
    checkpoint: Path, tmp_path: Path, run_cli, argv, code, message
) -> None:
    places = {"{ckpt}": str(checkpoint), "{tmp}": str(tmp_path), "{root}": str(ROOT)}
    for place, value in places.items():
        argv = [arg.replace(place, value) for arg in argv]
    returned, lines, err = run_cli(*argv)
    assert returned == code
    assert lines == []
    assert len(err.strip().splitlines()) == 1 and message in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--show-attention", " "], "cannot show the attention of an empty sentence"),
        (["--attention-png", "{tmp}/no/such/dir/att.png", "Hi."], "No such file or directory"),
    ],
)
def test_attention_errors_are_one_line_after_the_translation(
    checkpoint: Path, tmp_path: Path, run_cli, argv, message
) -> None:
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    code, lines, err = run_cli("--ckpt", str(checkpoint), "--device", "cpu", *argv)
    assert code == 1 and len(lines) == 1
    assert len(err.strip().splitlines()) == 1 and message in err


def test_corrupt_checkpoint_and_missing_gpu(tmp_path: Path, checkpoint: Path, run_cli) -> None:
    corrupt = tmp_path / "bad.ckpt"
    corrupt.write_bytes(b"not a checkpoint")
    code, _, err = run_cli("--ckpt", str(corrupt), "Hi.")
    assert code == 1 and "cannot read checkpoint" in err and len(err.splitlines()) == 1
    if not torch.cuda.is_available():
        code, _, err = run_cli("--ckpt", str(checkpoint), "--device", "cuda", "Hi.")
        assert code == 1 and "no CUDA GPU" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("error", [OSError("disk full"), ValueError("a bug")], ids=["write", "bug"])
def test_failure_leaves_no_partial_output(
    checkpoint: Path, tmp_path: Path, run_cli, monkeypatch, error: Exception
) -> None:
    """A failed write is one line; a bug is not dressed up as a user error. Neither leaves a file."""

    def fail_midway(self, texts, decode_cfg=None, prefixes=None, constraints=None):
        yield [translate_module.Translation("partial", 0.0)]
        raise error

    monkeypatch.setattr(Translator, "translate", fail_midway)
    argv = ["--ckpt", str(checkpoint), "--device", "cpu", "-o", str(tmp_path / "out.txt"), "Hi.", "Go."]
    if isinstance(error, OSError):
        code, _, err = run_cli(*argv)
        assert (
            code == 1
            and err.strip() == f"translate.py: error: cannot write --output {tmp_path}/out.txt: disk full"
        )
    else:
        with pytest.raises(ValueError, match="a bug"):
            run_cli(*argv)
    assert list(tmp_path.iterdir()) == []


def _rewritten(checkpoint: Path, tmp_path: Path, change) -> Path:
    """A copy of the fixture checkpoint with ``change(dict)`` applied: a checkpoint gone wrong."""
    data = torch.load(checkpoint, weights_only=True)
    change(data)
    path = tmp_path / "changed.ckpt"
    torch.save(data, path)
    return path


def _other_tokenizer(data: dict) -> None:
    data["seq2seq"]["tokenizer"] = tiny_tokenizer(vocab_size=280).to_dict()


def _other_model_weights(data: dict) -> None:
    other_cfg = ModelConfig(d_model=48, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_ff=64)
    other = Transformer(other_cfg, 300, 300)
    data["state_dict"] = {MODEL_PREFIX + name: tensor for name, tensor in other.state_dict().items()}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_other_tokenizer, "does not belong to its model"),
        (_other_model_weights, "weights do not match its model config"),
        (lambda data: data["seq2seq"]["model_config"].update(n_experts=8), "unusable seq2seq entry"),
        (lambda data: data.pop("seq2seq"), "is not a seq2seq checkpoint"),
    ],
    ids=["tokenizer", "weights", "config", "foreign"],
)
def test_checkpoint_of_another_model_or_tokenizer_is_refused(
    checkpoint: Path, tmp_path: Path, run_cli, change, message
) -> None:
    path = _rewritten(checkpoint, tmp_path, change)
    code, lines, err = run_cli("--ckpt", str(path), "--device", "cpu", "Hi.")
    assert code == 1 and lines == []
    assert message in err and len(err.strip().splitlines()) == 1


def test_fuzz_random_bytes_on_stdin_keep_one_output_line_per_input_line(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """translate.py in-process, its stdin as a process's: a UTF-8 text stream over the file, strict
    until the command reconfigures it, lines split at "\\n" only; its output must encode as a
    process's stdout would."""
    rng = random.Random(99)
    data = b"\n".join(rng.randbytes(rng.randint(0, 80)).replace(b"\n", b"") for _ in range(300)) + b"\n"
    source = tmp_path / "random.bin"
    source.write_bytes(data)
    argv = ["--ckpt", str(checkpoint), "--device", "cpu", "--greedy"]
    with source.open(encoding="utf-8", newline="\n") as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        result = python(str(ROOT / "translate.py"), *argv)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert result.stdout.encode("utf-8").count(b"\n") == data.count(b"\n") == 300


def _peak_rss_translating(checkpoint: Path, tmp_path: Path, lines: int) -> int:
    """Peak RSS (KiB) of a translate.py process streaming ``lines`` lines from a file on stdin."""
    sentences = [line.split("\t")[0] for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    source = tmp_path / f"in-{lines}.txt"
    with source.open("w", encoding="utf-8") as handle:
        handle.writelines(sentences[i % len(sentences)] + "\n" for i in range(lines))
    measure = (
        "import resource, runpy, sys\n"
        "sys.argv = ['translate.py', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_path('translate.py', run_name='__main__')\n"
        "finally:\n"
        "    print('PEAK_RSS_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    )
    output = tmp_path / f"out-{lines}.txt"
    argv = ["--ckpt", str(checkpoint), "--device", "cpu", "--greedy", "--max-len", "3", "-o", str(output)]
    with source.open() as stdin:
        result = subprocess.run(
            [sys.executable, "-c", measure, *argv],
            stdin=stdin,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(output.read_text(encoding="utf-8").splitlines()) == lines
    return int(result.stderr.split("PEAK_RSS_KIB")[-1].split()[0])


@pytest.mark.slow
def test_100k_lines_on_stdin_translate_in_bounded_memory(checkpoint: Path, tmp_path: Path) -> None:
    small = _peak_rss_translating(checkpoint, tmp_path, 10_000)
    large = _peak_rss_translating(checkpoint, tmp_path, 100_000)
    print(f"peak RSS: 10k lines {small / 1024:.0f} MiB, 100k lines {large / 1024:.0f} MiB")
    assert large - small < 64 * 1024, (small, large)  # 10x the lines, (almost) the same peak


def test_seeded_top_p_sampling_repeats_through_the_translator_and_the_cli(
    checkpoint: Path, translator: Translator, capsys
) -> None:
    texts = ["How are you?", "I like coffee.", "Where is the station?", "Good morning."]
    greedy = translator.decode_cfg_with(beam=1, nbest=1)
    decode_cfg = replace(greedy, sampling=True, temperature=1.5, top_p=0.9)
    runs = {}
    for seed in (5, 5, 6):
        translator.seed(seed)
        runs.setdefault(seed, []).append(best_texts(translator, texts, decode_cfg))
    assert runs[5][0] == runs[5][1] != runs[6][0]
    sampling = ["--sample", "--temperature", "1.5", "--top-p", "0.9", "--seed", "5"]
    expected = "".join(f"{text}\n" for text in runs[5][0])  # not splitlines: random weights emit \x0c
    for _ in range(2):
        assert (
            main(["--ckpt", str(checkpoint), "--device", "cpu", "--dtype", "float32", *sampling, *texts]) == 0
        )
        assert capsys.readouterr().out == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--sample", "--top-p", "0"], "--top-p must be in (0, 1]"), (["--top-p", "0.5"], "need --sample")],
)
def test_bad_top_p_is_a_usage_error(checkpoint: Path, run_cli, argv: list[str], message: str) -> None:
    code, lines, err = run_cli("--ckpt", str(checkpoint), *argv, "Hi.")
    assert code == 2 and lines == []
    assert message in err and len(err.strip().splitlines()) == 1


def test_ctrl_c_exits_130_and_a_reader_that_left_stops_quietly(
    checkpoint: Path, run_cli, monkeypatch
) -> None:
    class ReaderLeft(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    with monkeypatch.context() as patched:
        patched.setattr(sys, "stdout", ReaderLeft())
        assert run_cli("--ckpt", str(checkpoint), "--device", "cpu", "Hi.") == (1, [], "")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "open_model", interrupted)  # Ctrl-C while the model loads
    assert run_cli("--ckpt", str(checkpoint), "Hi.") == (130, [], "")
