"""The Translator on a real tiny checkpoint: the API, streaming, truncation, and odd input."""

from __future__ import annotations

import itertools
import logging
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from seq2seq.config import DecodeConfig
from seq2seq.decoding.overrides import DecodeOverrides
from seq2seq.decoding.shortlist import Shortlist, ShortlistError, default_path
from seq2seq.formats.checkpoint import load_model
from seq2seq.inference import translator as translate_module
from seq2seq.inference.backends import open_model
from seq2seq.inference.shortlist import fingerprint
from seq2seq.inference.translator import Translator


def best_texts(translator: Translator, texts, decode_cfg=None) -> list[str]:
    return [best.text for best, *_ in translator.translate(texts, decode_cfg)]


def test_stream_is_lazy_and_keeps_order(checkpoint: Path, monkeypatch) -> None:
    monkeypatch.setattr(translate_module, "CHUNK_LINES", 3)
    translator = open_model(checkpoint, device="cpu", batch_tokens=16).translator
    sentences = ["I like coffee very much.", "Hi.", "", "Where is the station?", "Go."]
    endless = itertools.cycle(sentences)  # would hang if the stream read everything first
    streamed = [best.text for best, *_ in itertools.islice(translator.translate(endless), len(sentences))]
    assert streamed == [best_texts(translator, [s])[0] for s in sentences]
    assert streamed[2] == "" and all(streamed[i] for i in (0, 1, 3, 4))


def test_long_input_is_truncated_with_one_warning(checkpoint: Path, caplog) -> None:
    translator = open_model(checkpoint, device="cpu").translator
    long_text = " ".join(["coffee"] * 200)
    with caplog.at_level(logging.WARNING, logger="seq2seq.inference.translator"):
        outputs = best_texts(translator, [long_text, long_text])
    assert len(outputs) == 2 and all(outputs)
    assert sum("max_positions" in record.getMessage() for record in caplog.records) == 1


def test_batches_default_to_the_budget_validation_decodes_with(checkpoint: Path) -> None:
    budget = load_model(checkpoint).data_config.eval_max_tokens
    assert open_model(checkpoint, device="cpu").translator.batch_tokens == budget
    assert open_model(checkpoint, device="cpu", batch_tokens=16).translator.batch_tokens == 16


def test_in_memory_model_matches_loaded_checkpoint(checkpoint: Path, translator: Translator) -> None:
    loaded = load_model(checkpoint)
    in_memory = Translator(loaded.model, loaded.tokenizer, loaded.decode_config)
    texts = ["Hi.", "I like coffee.", "Where is the station?"]
    assert best_texts(in_memory, texts) == best_texts(translator, texts)
    greedy = translator.decode_cfg_with(beam=1)
    assert best_texts(translator, texts, greedy) == [best_texts(translator, [t], greedy)[0] for t in texts]


def random_texts(rng: random.Random, count: int) -> list[str]:
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
    texts = random_texts(random.Random(1234), 150)
    outputs = best_texts(translator, texts)
    assert len(outputs) == len(texts)
    assert all(isinstance(output, str) and "\n" not in output and "\r" not in output for output in outputs)
    assert all(output == "" for text, output in zip(texts, outputs, strict=True) if not text.strip())


def test_open_model_returns_the_translator_ready_with_its_overrides_shortlist_and_seed(
    memorised_ckpt: Path, tmp_path: Path
) -> None:
    """What translate.py and serve.py ask of the opener, given at opening: nothing set on it after."""
    ckpt = tmp_path / "best.ckpt"
    ckpt.symlink_to(memorised_ckpt)
    loaded = load_model(ckpt)
    vocab = loaded.tokenizer.tgt_vocab_size
    every_type = Shortlist(
        np.zeros(loaded.tokenizer.src_vocab_size + 1, dtype=np.int64), np.zeros(0, dtype=np.int64),
        np.arange(vocab, dtype=np.int64), vocab, False, fingerprint(loaded.tokenizer),
    )  # fmt: skip
    every_type.save(default_path(ckpt))
    overrides = DecodeOverrides(beam=3, nbest=2, max_len=7)
    plain = open_model(ckpt, device="cpu", dtype="float32").translator
    opened = open_model(ckpt, device="cpu", dtype="float32", decode=overrides, shortlist="", seed=3)
    translator = opened.translator
    assert (
        translator.decode_cfg == overrides.applied_to(loaded.decode_config) == plain.decode_cfg_with(3, 2, 7)
    )
    assert translator.shortlist is not None and translator.compute.endswith(", shortlist")
    texts = ["How are you?", "I like coffee."]
    assert best_texts(translator, texts) == best_texts(plain, texts, translator.decode_cfg)
    sampled = DecodeOverrides(sample=True, temperature=1.5)
    draws = [
        best_texts(open_model(ckpt, device="cpu", decode=sampled, seed=seed).translator, texts * 4)
        for seed in (5, 5, 6)
    ]
    assert draws[0] == draws[1] != draws[2]


def test_decode_overrides_keep_what_they_do_not_name_and_sample_greedily() -> None:
    cfg = DecodeConfig(beam_size=4, nbest=3, max_len_a=1.2, max_len_b=5)
    assert DecodeOverrides().applied_to(cfg) == cfg
    assert DecodeOverrides(beam=2).applied_to(cfg) == replace(cfg, beam_size=2, nbest=2)
    assert DecodeOverrides(max_len=9).applied_to(cfg) == replace(cfg, max_len_a=0.0, max_len_b=9)
    drawn = DecodeOverrides(sample=True, nbest=1, top_k=5).applied_to(cfg)
    assert (drawn.beam_size, drawn.sampling, drawn.temperature, drawn.top_k, drawn.top_p) == (
        1,
        True,
        1.0,
        5,
        1.0,
    )
    assert not DecodeOverrides(sample=True, nbest=1, temperature=0).applied_to(cfg).sampling  # T -> 0: argmax
    assert DecodeOverrides(capture=True).applied_to(cfg).capture


def test_a_shortlist_needs_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(ShortlistError, match="a shortlist needs a checkpoint"):
        open_model(model=tmp_path, shortlist="")
