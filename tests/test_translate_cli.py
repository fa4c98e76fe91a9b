"""The translate CLI, the Translator and evaluation, on a real tiny checkpoint file."""

from __future__ import annotations

import io
import itertools
import logging
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.data.tokenizer import PAD_ID, TranslationTokenizer
from seq2seq.inference import translator as translate_module
from seq2seq.inference.cli import main
from seq2seq.inference.evaluation import reference_streams, score
from seq2seq.inference.translator import Translator
from seq2seq.model import Transformer
from seq2seq.training.checkpoint import inference_state, load_model

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "fixtures" / "tiny.tsv"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint with a real tokenizer and random weights, saved as training saves one."""
    tmp = tmp_path_factory.mktemp("ckpt")
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    tokenizer = TranslationTokenizer.train(
        (s for s, _ in pairs), (t for _, t in pairs), vocab_size=300, shared=True
    )
    torch.manual_seed(0)
    model_cfg = ModelConfig(
        d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=64, max_positions=64
    )
    model = Transformer(model_cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, PAD_ID)
    data_cfg = DataConfig(
        path=str(CORPUS),
        valid_size=12,
        test_size=12,
        vocab_size=300,
        max_tokens=512,
        cache_dir=str(tmp / "cache"),
    )
    decode_cfg = DecodeConfig(beam_size=2, max_len_a=1.0, max_len_b=4, min_len=1)  # min_len: never ""
    path = tmp / "tiny.ckpt"
    state = {f"model.{name}": tensor for name, tensor in model.state_dict().items()}
    torch.save(
        {"state_dict": state, "seq2seq": inference_state(model_cfg, decode_cfg, data_cfg, tokenizer)}, path
    )
    return path


@pytest.fixture(scope="module")
def translator(checkpoint: Path) -> Translator:
    return Translator.from_checkpoint(checkpoint, device="cpu")


def best_texts(translator: Translator, texts, settings=None) -> list[str]:
    return [best.text for best, *_ in translator.translate(texts, settings)]


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, list[str], str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_sentences_on_the_command_line(checkpoint: Path, translator: Translator, capsys) -> None:
    code, lines, _ = _run(
        capsys, "--ckpt", str(checkpoint), "--device", "cpu", "How are you?", "I like coffee."
    )
    assert code == 0
    assert lines == best_texts(translator, ["How are you?", "I like coffee."])
    assert all(lines)


def test_stdin_keeps_blank_lines_aligned(
    checkpoint: Path, translator: Translator, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("How are you?\n\n   \nI like coffee.\n"))
    code, lines, err = _run(capsys, "--ckpt", str(checkpoint), "--device", "cpu")
    assert code == 0
    first, last = best_texts(translator, ["How are you?", "I like coffee."])
    assert lines == [first, "", "", last]
    assert err == ""


def test_subprocess_reads_a_file_on_stdin(checkpoint: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("Good morning.\n\nThank you.\n", encoding="utf-8")
    with source.open() as stdin:
        result = subprocess.run(
            [sys.executable, str(REPO / "translate.py"), "--ckpt", str(checkpoint), "--device", "cpu"],
            stdin=stdin,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[0] and lines[1] == "" and lines[2]
    assert "Traceback" not in result.stderr


def test_nbest_prints_sorted_scored_hypotheses(checkpoint: Path, capsys) -> None:
    code, lines, _ = _run(
        capsys, "--ckpt", str(checkpoint), "--device", "cpu", "--beam", "3", "--nbest", "3", "Hi.", "Go."
    )
    assert code == 0
    rows = [line.split("\t") for line in lines]
    assert [int(row[0]) for row in rows] == [0, 0, 0, 1, 1, 1]
    for index in (0, 1):
        scores = [float(row[1]) for row in rows if int(row[0]) == index]
        assert scores == sorted(scores, reverse=True)


def test_eval_tsv_prints_bleu_and_chrf_with_signatures(checkpoint: Path, tmp_path: Path, capsys) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(
        "Hi.\tHola.\nHi.\t¡Hola!\nGo.\tVe.\nI like coffee.\tMe gusta el café.\n", encoding="utf-8"
    )
    hypotheses = tmp_path / "hyp.txt"
    code, lines, _ = _run(
        capsys, "--ckpt", str(checkpoint), "--device", "cpu", "--eval", str(pairs), "-o", str(hypotheses)
    )
    assert code == 0
    report = "\n".join(lines)
    assert "BLEU = " in report and "nrefs:var|case:mixed" in report
    assert "chrF = " in report and "nc:6|nw:0" in report
    assert "BLEU[src words 1-5]" in report and "sentences = 3" in report
    assert len(hypotheses.read_text(encoding="utf-8").splitlines()) == 3


def test_eval_split_rebuilds_the_training_split(checkpoint: Path, capsys) -> None:
    code, lines, err = _run(
        capsys, "--ckpt", str(checkpoint), "--device", "cpu", "--greedy", "--eval", "test"
    )
    assert code == 0, err
    assert any(line.startswith("BLEU = ") for line in lines)
    assert "sentences = 12" in lines


def test_attention_table_and_heatmap(checkpoint: Path, tmp_path: Path, capsys) -> None:
    png = tmp_path / "att.png"
    argv = ["--ckpt", str(checkpoint), "--device", "cpu", "--show-attention", "--attention-png", str(png)]
    code, lines, _ = _run(capsys, *argv, "I like coffee.")
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
    ],
)
def test_errors_are_one_line_without_traceback(checkpoint: Path, capsys, argv, code, message) -> None:
    argv = [arg.replace("{ckpt}", str(checkpoint)) for arg in argv]
    returned, lines, err = _run(capsys, *argv)
    assert returned == code
    assert lines == []
    assert len(err.strip().splitlines()) == 1 and message in err


def test_corrupt_checkpoint_and_missing_gpu(tmp_path: Path, checkpoint: Path, capsys) -> None:
    corrupt = tmp_path / "bad.ckpt"
    corrupt.write_bytes(b"not a checkpoint")
    code, _, err = _run(capsys, "--ckpt", str(corrupt), "Hi.")
    assert code == 1 and "cannot read checkpoint" in err and len(err.splitlines()) == 1
    if not torch.cuda.is_available():
        code, _, err = _run(capsys, "--ckpt", str(checkpoint), "--device", "cuda", "Hi.")
        assert code == 1 and "no CUDA GPU" in err and len(err.splitlines()) == 1


def test_failure_leaves_no_partial_output(checkpoint: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    def fail_midway(self, texts, settings=None):
        yield [translate_module.Translation("partial", 0.0)]
        raise ValueError("decoding exploded")

    monkeypatch.setattr(Translator, "translate", fail_midway)
    output = tmp_path / "out.txt"
    code, _, err = _run(capsys, "--ckpt", str(checkpoint), "--device", "cpu", "-o", str(output), "Hi.", "Go.")
    assert code == 1 and "decoding exploded" in err
    assert list(tmp_path.iterdir()) == []


def test_stream_is_lazy_and_keeps_order(translator: Translator, monkeypatch) -> None:
    monkeypatch.setattr(translate_module, "CHUNK_LINES", 3)
    sentences = ["I like coffee very much.", "Hi.", "", "Where is the station?", "Go."]
    endless = itertools.cycle(sentences)  # would hang if the stream read everything first
    translator.batch_tokens = 16
    streamed = [best.text for best, *_ in itertools.islice(translator.translate(endless), len(sentences))]
    assert streamed == [best_texts(translator, [s])[0] for s in sentences]
    assert streamed[2] == "" and all(streamed[i] for i in (0, 1, 3, 4))


def test_long_input_is_truncated_with_one_warning(checkpoint: Path, caplog) -> None:
    translator = Translator.from_checkpoint(checkpoint, device="cpu")
    long_text = " ".join(["coffee"] * 200)
    with caplog.at_level(logging.WARNING, logger="seq2seq.inference.translator"):
        outputs = best_texts(translator, [long_text, long_text])
    assert len(outputs) == 2 and all(outputs)
    assert sum("max_positions" in record.getMessage() for record in caplog.records) == 1


def test_in_memory_model_matches_loaded_checkpoint(checkpoint: Path, translator: Translator) -> None:
    loaded = load_model(checkpoint)
    in_memory = Translator(loaded.model, loaded.tokenizer, loaded.decode_config)
    texts = ["Hi.", "I like coffee.", "Where is the station?"]
    assert best_texts(in_memory, texts) == best_texts(translator, texts)
    greedy = translator.settings(beam=1)
    assert best_texts(translator, texts, greedy) == [best_texts(translator, [t], greedy)[0] for t in texts]


def test_variable_reference_counts_are_padded_with_none() -> None:
    hypotheses = ["el gato está en la mesa", "hola"]
    references = [["el gato está sobre la mesa", "un gato está en la mesa"], ["hola amigo mío y tuyo"]]
    assert reference_streams(references)[1] == ["un gato está en la mesa", None]
    result = score(hypotheses, references)
    assert result["bleu_signature"].startswith("nrefs:var")
    repeated = [["el gato está sobre la mesa", "un gato está en la mesa"], ["hola amigo mío y tuyo"] * 2]
    assert result["bleu"] == pytest.approx(score(hypotheses, repeated)["bleu"])  # None == "no reference"
    assert result["chrf"] == pytest.approx(score(hypotheses, repeated)["chrf"])


def _rewritten(checkpoint: Path, tmp_path: Path, change) -> Path:
    """A copy of the fixture checkpoint with ``change(dict)`` applied: a checkpoint gone wrong."""
    data = torch.load(checkpoint, weights_only=True)
    change(data)
    path = tmp_path / "changed.ckpt"
    torch.save(data, path)
    return path


def _other_tokenizer(data: dict) -> None:
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    other = TranslationTokenizer.train(
        (s for s, _ in pairs), (t for _, t in pairs), vocab_size=280, shared=True
    )
    data["seq2seq"]["tokenizer"] = other.to_dict()


def _other_model_weights(data: dict) -> None:
    other = Transformer(
        ModelConfig(d_model=48, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_ff=64), 300, 300, PAD_ID
    )
    data["state_dict"] = {f"model.{name}": tensor for name, tensor in other.state_dict().items()}


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
    checkpoint: Path, tmp_path: Path, capsys, change, message
) -> None:
    path = _rewritten(checkpoint, tmp_path, change)
    code, lines, err = _run(capsys, "--ckpt", str(path), "--device", "cpu", "Hi.")
    assert code == 1 and lines == []
    assert message in err and len(err.strip().splitlines()) == 1


def _random_texts(rng: random.Random, count: int) -> list[str]:
    """Random byte strings read as UTF-8 three ways, and random code points from every plane."""
    texts = []
    for _ in range(count):
        raw = rng.randbytes(rng.randint(0, 60))
        texts.append(raw.decode("utf-8", errors=rng.choice(["replace", "ignore", "surrogateescape"])))
        texts.append(
            "".join(
                chr(rng.choice([rng.randint(0, 0xD7FF), rng.randint(0xE000, 0x10FFFF)]))
                for _ in range(rng.randint(0, 30))
            )
        )
    return texts


def test_fuzz_random_bytes_and_code_points_translate_line_for_line(translator: Translator) -> None:
    texts = _random_texts(random.Random(1234), 150)
    outputs = best_texts(translator, texts)
    assert len(outputs) == len(texts)
    assert all(isinstance(output, str) and "\n" not in output and "\r" not in output for output in outputs)
    assert all(output == "" for text, output in zip(texts, outputs, strict=True) if not text.strip())


def test_fuzz_random_bytes_on_stdin_keep_one_output_line_per_input_line(
    checkpoint: Path, tmp_path: Path
) -> None:
    rng = random.Random(99)
    data = b"\n".join(rng.randbytes(rng.randint(0, 80)).replace(b"\n", b"") for _ in range(300)) + b"\n"
    source = tmp_path / "random.bin"
    source.write_bytes(data)
    with source.open("rb") as stdin:
        result = subprocess.run(
            [
                sys.executable,
                str(REPO / "translate.py"),
                "--ckpt",
                str(checkpoint),
                "--device",
                "cpu",
                "--greedy",
            ],
            stdin=stdin,
            capture_output=True,
            cwd=REPO,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    assert b"Traceback" not in result.stderr
    assert result.stdout.count(b"\n") == data.count(b"\n") == 300


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
            cwd=REPO,
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
    settings = replace(translator.settings(beam=1, nbest=1), sampling=True, temperature=1.5, top_p=0.9)
    runs = {}
    for seed in (5, 5, 6):
        translator.seed(seed)
        runs.setdefault(seed, []).append(best_texts(translator, texts, settings))
    assert runs[5][0] == runs[5][1] != runs[6][0]
    sampling = ["--sample", "--temperature", "1.5", "--top-p", "0.9", "--seed", "5"]
    expected = "".join(f"{text}\n" for text in runs[5][0])  # not splitlines: random weights emit \x0c
    for _ in range(2):
        assert main(["--ckpt", str(checkpoint), "--device", "cpu", *sampling, *texts]) == 0
        assert capsys.readouterr().out == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--sample", "--top-p", "0"], "--top-p must be in (0, 1]"), (["--top-p", "0.5"], "need --sample")],
)
def test_bad_top_p_is_a_usage_error(checkpoint: Path, capsys, argv: list[str], message: str) -> None:
    code, lines, err = _run(capsys, "--ckpt", str(checkpoint), *argv, "Hi.")
    assert code == 2 and lines == []
    assert message in err and len(err.strip().splitlines()) == 1
