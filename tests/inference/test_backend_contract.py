"""What every translator backend promises, run against each: ours on a checkpoint, CTranslate2 and
transformers on an export of it. translate.py, serve.py and the Python API take any of them
through ``open_model``; a backend that breaks one of these breaks them all."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from seq2seq.inference.backends import open_model
from seq2seq.inference.targets import TargetError
from seq2seq.inference.translator import Translation, Translator, TranslatorBase

TEXTS = ["How are you?", "", "I like coffee.", "  \t ", "Where is the station?", "Good morning."]
ENGINES = {"pytorch": "PyTorch", "ctranslate2": "CTranslate2", "transformers": "transformers"}


@pytest.fixture(scope="module", params=sorted(ENGINES))
def translator(request, trained_ckpt: Path) -> TranslatorBase:
    """The trained checkpoint behind one backend, in float32 on the CPU."""
    if request.param == "pytorch":
        return open_model(trained_ckpt, device="cpu", dtype="float32").translator
    folder = request.getfixturevalue("ct2_export" if request.param == "ctranslate2" else "hf_export")
    return open_model(model=folder, device="cpu").translator


def test_it_names_its_engine_and_number_type(translator: TranslatorBase, request) -> None:
    engine = ENGINES[request.node.callspec.params["translator"]]
    assert translator.compute.startswith(f"{engine} ") and "float32" in translator.compute


@pytest.mark.parametrize(("beam", "nbest"), [(1, 1), (3, 1), (3, 3)])
def test_one_nbest_list_per_text_in_input_order_best_first(
    translator: TranslatorBase, beam: int, nbest: int
) -> None:
    """Blank texts keep an empty translation and their place; the others get ``nbest`` one-line
    hypotheses, the best first; the same text translates the same wherever it stands."""
    cfg = translator.decode_cfg_with(beam=beam, nbest=nbest)
    results = list(translator.translate(TEXTS, cfg))
    assert len(results) == len(TEXTS)
    for text, hypotheses in zip(TEXTS, results, strict=True):
        if not text.strip():
            assert hypotheses == [Translation("", 0.0)]
            continue
        assert len(hypotheses) == nbest
        assert all("\n" not in h.text and h.score <= 0 for h in hypotheses)
        assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)
    alone = [next(translator.translate([text], cfg)) for text in TEXTS]
    assert [[h.text for h in hs] for hs in alone] == [[h.text for h in hs] for hs in results]


@pytest.mark.parametrize("beam", [1, 3])
def test_search_keeps_to_the_output_limit(translator: TranslatorBase, beam: int) -> None:
    """``search``, the one method a backend writes: at most max_len_a * source + max_len_b tokens."""
    cfg = replace(translator.decode_cfg_with(beam=beam, nbest=1), max_len_a=0.0, max_len_b=2)
    results = translator.search(translator.encode([text for text in TEXTS if text.strip()]), cfg)
    assert all(len(hypotheses) == 1 and len(hypotheses[0].tokens) <= 2 for hypotheses in results)


def test_a_seed_repeats_sampling(translator: TranslatorBase) -> None:
    cfg = replace(translator.decode_cfg_with(beam=1, nbest=1), sampling=True, temperature=1.5)
    texts = [text for text in TEXTS if text.strip()] * 4
    runs = []
    for seed in (1, 1, 2):
        translator.seed(seed)
        runs.append([hypotheses[0].text for hypotheses in translator.translate(texts, cfg)])
    assert runs[0] == runs[1] != runs[2]


def test_a_prefix_is_kept_or_refused_in_one_line(translator: TranslatorBase) -> None:
    """A checkpoint continues the prefix; an export cannot force one and says so (translate.py
    prints that line and exits 2)."""
    texts, prefixes = ["How are you?", "I like coffee."], ["¿Cómo", ""]
    if not isinstance(translator, Translator):
        with pytest.raises(TargetError, match=r"^a target prefix or constraint needs a checkpoint"):
            list(translator.translate(texts, prefixes=prefixes))
        return
    first, second = (hypotheses[0].text for hypotheses in translator.translate(texts, prefixes=prefixes))
    assert first.startswith("¿Cómo") and second == next(translator.translate(texts[1:]))[0].text
