"""The captured decoder step (``decode.capture``): the eager cached search's translations and scores,
one compile per batch shape, and the switch from the command line."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from seq2seq import capture
from seq2seq.config import ConfigError
from seq2seq.data.batching import pad_ids
from seq2seq.decoding import generate
from seq2seq.decoding.captured_steps import Decoders, bucket
from seq2seq.inference.backends import open_model
from seq2seq.inference.translator import Translator
from tests.helpers.tiny import CORPUS
from tests.helpers.trained import MEMORISED_PAIRS


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> Iterator[CompileCounterWithBackend]:
    """Compiles counted, with no kernels built; the process's recompile limit left as it was."""
    counted = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(capture, "BACKEND", counted)
    limit = torch._dynamo.config.recompile_limit
    yield counted
    assert torch._dynamo.config.recompile_limit == limit


def memorised_translator(ckpt: Path) -> Translator:
    return open_model(ckpt, device="cpu", dtype="float32").translator


def source_batches(translator: Translator) -> list[list[list[int]]]:
    """The memorised sources in two batches: 3 and 37 sentences, so padded to 4 and 64 rows."""
    lines = [line.split("\t")[0] for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    sources = translator.encode(lines[:MEMORISED_PAIRS])
    return [sources[:3], sources[3:]]


@pytest.mark.parametrize("beam", [1, 5])
def test_captured_search_gives_the_eager_translations_compiling_once_per_shape(
    memorised_ckpt: Path, counter: CompileCounterWithBackend, beam: int
) -> None:
    translator = memorised_translator(memorised_ckpt)
    model = translator.model
    eager_cfg = translator.decode_cfg_with(beam=beam, nbest=beam)
    captured_cfg = replace(eager_cfg, capture=True)
    decoders: Decoders = {}
    for batch in [*source_batches(translator), *source_batches(translator)]:  # each shape twice
        src = pad_ids(batch)
        expected = generate(model, src, eager_cfg)
        got = generate(model, src, captured_cfg, decoders=decoders)
        for want, have in zip(expected, got, strict=True):
            assert [h.tokens for h in have] == [h.tokens for h in want]
            assert [h.score for h in have] == pytest.approx([h.score for h in want], abs=1e-4)
    shapes = decoders[model].caches
    assert {(sentences, beams) for sentences, beams, *_ in shapes} == {(4, beam), (64, beam)}
    assert counter.frame_count == len(shapes)  # one compile per batch shape, none per step or batch


def test_buckets_are_powers_of_two_from_the_smallest() -> None:
    assert [bucket(n, 16) for n in (1, 16, 17, 33)] == [16, 16, 32, 64]
    assert [bucket(n) for n in (1, 3, 4, 5)] == [1, 4, 4, 8]


def test_capture_refuses_a_shortlist_and_int8(
    memorised_ckpt: Path, counter: CompileCounterWithBackend
) -> None:
    translator = memorised_translator(memorised_ckpt)
    cfg = replace(translator.decode_cfg, capture=True)
    src = pad_ids(source_batches(translator)[0])
    with pytest.raises(ConfigError, match=r"decode\.capture does not work with a shortlist"):
        generate(translator.model, src, cfg, torch.arange(translator.tokenizer.tgt_vocab_size))
    int8 = open_model(memorised_ckpt, device="cpu", dtype="int8").translator
    with pytest.raises(ConfigError, match=r"decode\.capture does not work with int8 weights"):
        generate(int8.model, src, cfg)


def test_translate_capture_reaches_the_decoder(
    memorised_ckpt: Path, counter: CompileCounterWithBackend, run_cli
) -> None:
    sentences = [line.split("\t")[0] for line in CORPUS.read_text(encoding="utf-8").splitlines()[:3]]
    args = ["--ckpt", str(memorised_ckpt), "--device", "cpu", "--beam", "5", *sentences]
    code, eager, _ = run_cli(*args, "--dtype", "float32")
    assert code == 0 and counter.frame_count == 0
    code, captured, _ = run_cli(*args, "--capture")  # --dtype auto: float32, the captured step's
    assert code == 0 and captured == eager
    assert counter.frame_count == 1


def test_capture_refuses_bf16_and_a_machine_without_a_compiler_in_one_line(
    memorised_ckpt: Path, counter: CompileCounterWithBackend, run_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In bf16 the compiled step rounds otherwise than the eager one: 12 of 40 greedy translations
    differed; without a compiler inductor failed in a long traceback at the first sentence."""
    args = ["--ckpt", str(memorised_ckpt), "--device", "cpu", "--capture", "Hi."]
    code, lines, err = run_cli(*args, "--dtype", "bfloat16")
    assert (code, lines) == (2, [])
    assert err.strip() == (
        "translate.py: error: decode.capture decodes in float32 only, not bfloat16, whose translations "
        "it changes: use --dtype float32 (see --help)"
    )
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    code, lines, err = run_cli(*args)
    assert (code, lines) == (2, [])
    assert err.strip() == (
        "translate.py: error: --capture compiles the decoder step: no C++ compiler on PATH "
        "(torch.compile's CPU backend builds C++; set CXX or install g++) (see --help)"
    )
    assert counter.frame_count == 0  # refused before any sentence
