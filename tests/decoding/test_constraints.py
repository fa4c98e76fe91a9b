"""Terminology constraints on the tiny trained checkpoint: every output contains every phrase of its
sentence (in order when asked), the batched search finds what the per-sentence reference finds, a
sentence without any gets plain beam search's output exactly, and bad constraints are one line
(exit 2, HTTP 422)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from seq2seq.data.batching import pad_ids
from seq2seq.decoding import beam_search, generate
from seq2seq.decoding.constrained import constrained_search
from seq2seq.decoding.scorers import prefix_tensor
from seq2seq.inference.backends import open_model
from seq2seq.inference.targets import TargetError
from seq2seq.inference.translator import DEFAULT_BATCH_TOKENS, Translator
from seq2seq.serving.app import create_app
from seq2seq.serving.batcher import DynamicBatcher
from seq2seq.serving.service import Limits, TranslationService
from tests.helpers.constrained_reference import Progress, reference_search
from tests.helpers.tiny import CORPUS
from tests.helpers.trained import MEMORISED_PAIRS

SENTENCES = ["How are you?", "I like coffee.", "Tom is here.", "Where is the station, please?"]
CONSTRAINTS = [["bien"], ["café", "mucho"], [], ["estación"]]
ORDERED = [["estás", "bien"], ["mucho", "café"], ["Tom", "aquí"], ["por favor", "la estación"]]


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
    assert Progress().after(9, phrases, ordered=True).met(phrases) == 0  # the second waits for the first


def batch(translator: Translator, texts: list[str], phrases: list[list[str]]) -> tuple:
    """The texts as padded source ids and their phrases as target ids."""
    src = pad_ids(translator.encode(texts))
    return src, [translator.tokenizer.encode_target(p) if p else [] for p in phrases]


@pytest.mark.parametrize(("in_order", "prefixes"), [(False, None), (True, ["", "Me", "", "¿Dónde"])])
def test_the_batched_search_finds_what_the_per_sentence_reference_finds(
    single: Translator, in_order: bool, prefixes
) -> None:
    """Same hypotheses, scores within float tolerance, whether a sentence is searched in a batch or
    alone, and as the plain-Python per-sentence search finds them."""
    cfg = single.decode_cfg_with(beam=4, nbest=3)
    src, wanted = batch(single, SENTENCES, ORDERED)
    forced = (
        None
        if prefixes is None
        else prefix_tensor(single.tokenizer.encode_target(prefixes), None, src.device)[1]
    )
    batched = constrained_search(single.model, src, cfg, wanted, prefixes=forced, in_order=in_order)
    alone = [
        constrained_search(single.model, src[i : i + 1], cfg, wanted[i : i + 1],
                           prefixes=None if forced is None else forced[i : i + 1], in_order=in_order)[0]
        for i in range(len(SENTENCES))
    ]  # fmt: skip
    reference = reference_search(single.model, src, cfg, wanted, forced, in_order)
    for got, one, want in zip(batched, alone, reference, strict=True):
        assert len(got) == 3
        for other in (one, want):
            assert [h.tokens for h in got] == [h.tokens for h in other]
            assert [h.score for h in got] == pytest.approx([h.score for h in other], abs=1e-5)


@pytest.mark.parametrize("in_order", [False, True])
def test_every_output_contains_every_phrase_in_order_when_asked(single: Translator, in_order: bool) -> None:
    cfg = single.decode_cfg_with(beam=3, nbest=3)
    results = single.translate(SENTENCES, cfg, constraints=ORDERED, constraints_in_order=in_order)
    unordered = 0
    for phrases, nbest in zip(ORDERED, results, strict=True):
        for hypothesis in nbest:
            places = [hypothesis.text.find(phrase) for phrase in phrases]
            assert -1 not in places, (phrases, hypothesis.text)
            unordered += places != sorted(places)
    if in_order:
        assert unordered == 0
    else:
        assert unordered > 0  # the phrases are listed against the model's order: unasked, it keeps its own


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
    src = pad_ids(single.encode(SENTENCES))
    searched = constrained_search(single.model, src, cfg, [[] for _ in SENTENCES])
    assert searched == beam_search(single.model, src, cfg)  # the same tokens and the same scores


def test_a_phrase_met_early_is_not_lost_when_the_search_moves_on(single: Translator) -> None:
    """Whatever the beam, each output holds every phrase: complete hypotheses only finish."""
    for beam in (2, 5):
        cfg = single.decode_cfg_with(beam=beam, nbest=2)
        for phrases, nbest in zip(
            ORDERED, single.translate(SENTENCES, cfg, constraints=ORDERED), strict=True
        ):
            assert len(nbest) == 2 and all(p in h.text for h in nbest for p in phrases)


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
    code, out, err = run_cli(
        "--ckpt", ckpt, "--beam", "3", "--constraints-in-order", "--tsv", "I like coffee.\t\tmucho\tcafé"
    )
    assert code == 0, err
    assert 0 <= out[0].index("mucho") < out[0].index("café")
    code, out, err = run_cli("--ckpt", ckpt, "--beam", "3", "--constraints-in-order", "I like coffee.")
    assert (code, out) == (2, [])
    assert len(err.strip().splitlines()) == 1 and "needs --tsv" in err
    too_long = "I like coffee.\tMe\tcafé con leche y mucho más azúcar"  # the prefix's tokens count too
    code, out, err = run_cli("--ckpt", ckpt, "--beam", "3", "--max-len", "4", "--tsv", too_long)
    assert (code, out) == (2, [])
    assert len(err.strip().splitlines()) == 1 and "constraints have" in err and "more than the 4" in err


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
        body = {"text": SENTENCES, "constraints": ORDERED, "constraints_in_order": True, "beam": 3}
        ordered = client.post("/translate", json=body)
        assert ordered.status_code == 200, ordered.text
        for phrases, result in zip(ORDERED, ordered.json()["translations"], strict=True):
            places = [result["text"].find(phrase) for phrase in phrases]
            assert -1 not in places and places == sorted(places), (phrases, result["text"])
        for bad, words in [
            ({"text": "Hi.", "constraints": ["café"], "beam": 1}, "beam search"),
            ({"text": "Hi.", "constraints": [["café"]], "beam": 3}, "list of phrases"),
            ({"text": ["Hi.", "Ok."], "constraints": [["café"]], "beam": 3}, "list of phrases"),
            ({"text": "Hi.", "constraints": [""], "beam": 3}, "empty"),
            ({"text": "Hi.", "constraints": ["café"], "constraints_in_order": "yes"}, "boolean"),
            (
                {"text": "Hi.", "constraints": ["café con leche y mucho más"], "max_len": 3, "beam": 3},
                "than the 3",
            ),
        ]:
            refused = client.post("/translate", json=bad)
            assert refused.status_code == 422, refused.text
            assert words in refused.json()["error"]


def test_a_term_the_translation_already_has_inside_it_changes_nothing(memorised_ckpt: Path) -> None:
    """A phrase is matched as a word inside a sentence is spelled (after a space): a term the
    search finds on its own is met where it stands, not forced a second time or glued to a word."""
    translator = open_model(memorised_ckpt, device="cpu", dtype="float32").translator
    cfg = translator.decode_cfg_with(beam=4)
    pairs = [line.split("\t") for line in CORPUS.read_text().splitlines()[:MEMORISED_PAIRS]]
    sources = [english for english, spanish in pairs if len(spanish.split()) > 3][:10]
    plain = [best.text for best, *_ in translator.translate(sources, cfg)]
    terms = [[text.split()[1]] for text in plain]  # a word inside each translation
    assert len(sources) == 10 and all(len(text.split()) > 2 for text in plain)
    constrained = [best.text for best, *_ in translator.translate(sources, cfg, constraints=terms)]
    assert constrained == plain
