"""Terminology constraints on the tiny trained checkpoint: every output contains every phrase of its
sentence, a sentence without any gets plain beam search's output exactly, and bad constraints are
one line (exit 2, HTTP 422)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from seq2seq.data.batching import pad_ids
from seq2seq.decoding import generate
from seq2seq.decoding.constrained import Progress
from seq2seq.inference.backends import open_model
from seq2seq.inference.translator import DEFAULT_BATCH_TOKENS, TargetError, Translator
from seq2seq.serving.app import create_app
from seq2seq.serving.batcher import DynamicBatcher
from seq2seq.serving.service import Limits, TranslationService

SENTENCES = ["How are you?", "I like coffee.", "Tom is here.", "Where is the station, please?"]
CONSTRAINTS = [["bien"], ["café", "mucho"], [], ["estación"]]


@pytest.fixture(scope="module")
def single(trained_ckpt: Path) -> Translator:
    return open_model(trained_ckpt, device="cpu", dtype="float32").translator


def test_progress_through_phrases() -> None:
    phrases = [[5, 6, 7], [9]]
    progress = Progress().after(5, phrases).after(6, phrases)
    assert (progress.current, progress.position, progress.met(phrases)) == (0, 2, 2)
    broken = progress.after(9, phrases)  # the first phrase breaks off; the token completes the second
    assert broken.done == {1} and broken.current is None and broken.met(phrases) == 1
    assert progress.after(7, phrases).after(9, phrases).complete(phrases)


@pytest.mark.parametrize("prefixes", [None, ["", "Me", "", ""]])
def test_every_output_contains_every_phrase(single: Translator, prefixes) -> None:
    cfg = single.decode_cfg_with(beam=3, nbest=2)
    for phrases, nbest in zip(
        CONSTRAINTS, single.translate(SENTENCES, cfg, prefixes, CONSTRAINTS), strict=True
    ):
        assert len(nbest) == 2
        for hypothesis in nbest:
            assert all(phrase in hypothesis.text for phrase in phrases), (phrases, hypothesis.text)


def test_no_constraints_is_plain_beam_search(single: Translator) -> None:
    cfg = single.decode_cfg_with(beam=3, nbest=2)
    plain = list(single.translate(SENTENCES, cfg))
    assert list(single.translate(SENTENCES, cfg, constraints=[[] for _ in SENTENCES])) == plain
    constrained = list(single.translate(SENTENCES, cfg, constraints=CONSTRAINTS))
    assert constrained[2] == plain[2]  # the sentence without constraints, beside others with them


@pytest.mark.parametrize(
    ("beam", "constraints", "words"),
    [
        (1, [["café"]], "need beam search"),
        (3, [["café", "  "]], "a constraint is empty"),
        (3, [["café con leche y mucho más azúcar"]], "more than the 2"),
    ],
)
def test_bad_constraints_are_one_line(single: Translator, beam: int, constraints, words: str) -> None:
    cfg = replace(single.decode_cfg_with(beam=beam), max_len_a=0.0, max_len_b=2)
    with pytest.raises(TargetError, match=words):
        list(single.translate(["I like coffee."], cfg, constraints=constraints))


def test_phrases_and_prefixes_outside_a_shortlist_join_it(single: Translator) -> None:
    """Tokens the shortlist lacks are added to it, and the output comes back as vocabulary ids."""
    tokenizer, cfg = single.tokenizer, single.decode_cfg_with(beam=3)
    texts, prefixes, phrases = ["How are you?", "I like coffee."], ["¿Cómo", "Me"], [["bien"], ["café"]]
    wanted = [tokenizer.encode_target(p) for p in phrases]
    shortlist = torch.arange(10)  # the special ids and a few others, none of the phrases' or prefixes'
    out = generate(single.model, pad_ids(single.encode(texts)), cfg, shortlist,
                   tokenizer.encode_target(prefixes), wanted)  # fmt: skip
    for prefix, sentence_phrases, (best,) in zip(prefixes, phrases, out, strict=True):
        text = tokenizer.decode_target([best.tokens])[0]
        assert text.startswith(prefix) and all(phrase in text for phrase in sentence_phrases), text


def test_translate_py_reads_constraints_after_the_prefix(run_cli, trained_ckpt: Path) -> None:
    ckpt = str(trained_ckpt)
    code, out, err = run_cli("--ckpt", ckpt, "--beam", "3", "--tsv", "I like coffee.\t\tcafé\tmucho")
    assert code == 0, err
    assert "café" in out[0] and "mucho" in out[0]
    code, out, err = run_cli("--ckpt", ckpt, "--greedy", "--tsv", "I like coffee.\t\tcafé")
    assert (code, out) == (2, [])
    assert len(err.strip().splitlines()) == 1 and "beam search" in err


def test_the_server_takes_constraints(trained_ckpt: Path) -> None:
    opened = open_model(trained_ckpt, device="cpu", batch_tokens=DEFAULT_BATCH_TOKENS)
    service = TranslationService(opened.facts, DynamicBatcher(opened.translator, 16, 0.005), Limits())
    with TestClient(create_app(service)) as client:
        answer = client.post("/translate", json={"text": SENTENCES, "constraints": CONSTRAINTS, "beam": 3})
        assert answer.status_code == 200, answer.text
        for phrases, result in zip(CONSTRAINTS, answer.json()["translations"], strict=True):
            assert all(phrase in result["text"] for phrase in phrases)
        one = client.post("/translate", json={"text": "I like coffee.", "constraints": ["café"], "beam": 3})
        assert one.status_code == 200 and "café" in one.json()["translations"][0]["text"]
        for bad, words in [
            ({"text": "Hi.", "constraints": ["café"], "beam": 1}, "beam search"),
            ({"text": "Hi.", "constraints": [["café"]], "beam": 3}, "list of phrases"),
            ({"text": ["Hi.", "Ok."], "constraints": [["café"]], "beam": 3}, "list of phrases"),
            ({"text": "Hi.", "constraints": [""], "beam": 3}, "empty"),
        ]:
            refused = client.post("/translate", json=bad)
            assert refused.status_code == 422, refused.text
            assert words in refused.json()["error"]
