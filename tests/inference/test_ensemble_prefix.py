"""Ensembles and target prefixes, through the API, translate.py and the server, on the tiny trained
checkpoint: an ensemble of a model with itself is that model; a prefix starts every output and its
scores are the model's score of the whole output; an empty prefix changes nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import pad_ids
from seq2seq.decoding.forced import forced_scores
from seq2seq.formats.checkpoint import save_atomically, seq2seq_entry
from seq2seq.inference.backends import open_model
from seq2seq.inference.targets import TargetError
from seq2seq.inference.translator import DEFAULT_BATCH_TOKENS, Translator
from seq2seq.model import Transformer
from seq2seq.serving.app import create_app
from seq2seq.serving.batcher import DynamicBatcher
from seq2seq.serving.service import Limits, TranslationService
from seq2seq.training.module import MODEL_PREFIX
from tests.helpers.compose import data_config
from tests.helpers.tiny import tiny_tokenizer

SENTENCES = ["How are you?", "I like coffee.", "Tom is here.", "Where is the station, please?", "Hi."]
PREFIXES = ["¿Cómo", "", "Tom", "¿Dónde está", "Hola"]
SEARCHES = [(1, 1), (3, 2)]  # (beam, nbest): greedy and beam search


def opened(*paths: Path) -> Translator:
    return open_model(list(paths), device="cpu", dtype="float32").translator


def results(translator: Translator, beam: int, nbest: int, prefixes: list[str] | None = None) -> list:
    cfg = translator.decode_cfg_with(beam=beam, nbest=nbest)
    return [[(t.text, t.score) for t in n] for n in translator.translate(SENTENCES, cfg, prefixes)]


@pytest.fixture(scope="module")
def single(trained_ckpt: Path) -> Translator:
    return opened(trained_ckpt)


@pytest.fixture(scope="module")
def other_vocabulary(tmp_path_factory: pytest.TempPathFactory, tiny_model_cfg) -> Path:
    """A checkpoint whose tokenizer has another vocabulary than the trained one's."""
    tokenizer = tiny_tokenizer(vocab_size=280)
    model = Transformer(tiny_model_cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    path = tmp_path_factory.mktemp("other") / "other.ckpt"
    meta = seq2seq_entry(tiny_model_cfg, DecodeConfig(), data_config("tiny"), tokenizer, MODEL_PREFIX)
    state = {MODEL_PREFIX + name: tensor for name, tensor in model.state_dict().items()}
    save_atomically({"state_dict": state, "seq2seq": meta}, path)
    return path


@pytest.mark.parametrize(("beam", "nbest"), SEARCHES)
def test_an_ensemble_of_a_model_with_itself_is_that_model(
    trained_ckpt: Path, single: Translator, beam: int, nbest: int
) -> None:
    pair = opened(trained_ckpt, trained_ckpt)
    assert len(pair.models) == 2 and pair.models[0] is not pair.models[1]  # two caches, two searches
    assert results(pair, beam, nbest) == results(single, beam, nbest)


def test_an_ensemble_averages_its_members(trained_ckpt: Path, single: Translator) -> None:
    """Beside a model that knows nothing (all logits equal), greedy picks the trained model's tokens
    (a uniform distribution adds the same to each), and each score is the mean of the members'."""
    blank = opened(trained_ckpt).model
    torch.nn.init.zeros_(blank.generator.weight)
    pair = Translator([single.model, blank], single.tokenizer, single.decode_cfg)
    cfg = single.decode_cfg_with(beam=1)
    for sentence, (got,), (alone,) in zip(
        SENTENCES, pair.translate(SENTENCES, cfg), single.translate(SENTENCES, cfg), strict=True
    ):
        assert got.text == alone.text
        src, tokens = pad_ids(single.encode([sentence])), single.tokenizer.encode_target([got.text])
        members = [forced_scores(m, src, tokens, cfg)[0] for m in (single.model, blank)]
        assert got.score == pytest.approx(sum(members) / 2, abs=1e-4)
        assert got.score < alone.score - 1  # the blank model's share counts


@pytest.mark.parametrize(("beam", "nbest"), SEARCHES)
def test_every_output_starts_with_its_prefix_and_is_scored_whole(
    single: Translator, beam: int, nbest: int
) -> None:
    got = results(single, beam, nbest, PREFIXES)
    model, cfg = single.model, single.decode_cfg_with(beam=beam, nbest=nbest)
    for sentence, prefix, nbest_list in zip(SENTENCES, PREFIXES, got, strict=True):
        assert len(nbest_list) == nbest
        src = pad_ids(single.encode([sentence]))
        for text, score in nbest_list:
            assert text.startswith(prefix)
            tokens = single.tokenizer.encode_target([text])
            assert score == pytest.approx(forced_scores(model, src, tokens, cfg)[0], abs=1e-4)


@pytest.mark.parametrize(("beam", "nbest"), SEARCHES)
def test_empty_prefixes_change_nothing(single: Translator, beam: int, nbest: int) -> None:
    assert results(single, beam, nbest, [""] * len(SENTENCES)) == results(single, beam, nbest)


def test_a_prefix_with_an_ensemble_and_a_shortlist_path(trained_ckpt: Path) -> None:
    pair = opened(trained_ckpt, trained_ckpt)
    for (text, _), prefix in zip((n[0] for n in results(pair, 2, 1, PREFIXES)), PREFIXES, strict=True):
        assert text.startswith(prefix)


def test_a_prefix_longer_than_the_output_limit_is_one_line(single: Translator) -> None:
    cfg = replace(single.decode_cfg_with(beam=2), max_len_a=0.0, max_len_b=2)
    with pytest.raises(TargetError, match=r"input 2: the target prefix has .* tokens, more than the 2"):
        list(single.translate(["Hi.", "Hi."], cfg, ["", "Hola, ¿cómo estás?"]))
    with pytest.raises(TargetError, match="needs a source sentence"):
        list(single.translate(["  "], cfg, ["Hola"]))


def test_translate_py_reads_a_prefix_after_a_tab(run_cli, trained_ckpt: Path, single: Translator) -> None:
    code, out, err = run_cli(
        "--ckpt", str(trained_ckpt), "--dtype", "float32", "--tsv", "I like coffee.\tMe gusta"
    )
    assert code == 0, err
    assert out[0].startswith("Me gusta")
    long_prefix = "I like coffee.\tMe gusta mucho el"
    code, out, err = run_cli("--ckpt", str(trained_ckpt), "--max-len", "2", "--tsv", long_prefix)
    assert (code, out) == (2, [])
    assert len(err.strip().splitlines()) == 1 and "target prefix" in err


def test_translate_py_ensemble(run_cli, trained_ckpt: Path, other_vocabulary: Path) -> None:
    ckpt = str(trained_ckpt)
    one = run_cli("--ckpt", ckpt, "--dtype", "float32", "--beam", "3", "--nbest", "2", *SENTENCES)
    two = run_cli(
        "--ckpt", ckpt, "--ckpt", ckpt, "--dtype", "float32", "--beam", "3", "--nbest", "2", *SENTENCES
    )
    assert one[0] == two[0] == 0 and one[1] == two[1]
    code, out, err = run_cli("--ckpt", ckpt, "--ckpt", str(other_vocabulary), "Hi.")
    assert (code, out) == (2, [])
    assert len(err.strip().splitlines()) == 1 and "different tokenizers" in err
    code, _, err = run_cli("--ckpt", ckpt, "--ckpt", ckpt, "--show-attention", "Hi.")
    assert code == 2 and "one --ckpt" in err


def _server(translator: Translator, facts) -> TestClient:
    service = TranslationService(facts, DynamicBatcher(translator, 16, 0.005), Limits(max_input_chars=200))
    return TestClient(create_app(service))


def test_the_server_takes_a_prefix_and_an_ensemble(trained_ckpt: Path, single: Translator) -> None:
    opened_pair = open_model([trained_ckpt, trained_ckpt], device="cpu", batch_tokens=DEFAULT_BATCH_TOKENS)
    with _server(opened_pair.translator, opened_pair.facts) as client:
        body = {"text": SENTENCES, "prefix": PREFIXES, "beam": 3, "nbest": 2}
        answer = client.post("/translate", json=body)
        assert answer.status_code == 200, answer.text
        want = results(single, 3, 2, PREFIXES)
        got = [[(h["text"], h["score"]) for h in r["nbest"]] for r in answer.json()["translations"]]
        assert [[t for t, _ in n] for n in got] == [[t for t, _ in n] for n in want]
        assert client.post("/attention", json={"text": "Hi."}).status_code == 501
        for bad, words in [
            ({"text": "Hi.", "prefix": ["Hola"]}, "shaped as text"),
            ({"text": ["Hi.", "Ok."], "prefix": ["Hola"]}, "shaped as text"),
            ({"text": "Hi.", "prefix": "Hola, ¿cómo estás hoy?", "max_len": 2}, "target prefix"),
            ({"text": "Hi.", "prefix": 5}, "string"),
        ]:
            refused = client.post("/translate", json=bad)
            assert refused.status_code == 422, refused.text
            assert words in refused.json()["error"]


def test_the_attention_of_a_prefixed_translation(trained_ckpt: Path) -> None:
    one = open_model(trained_ckpt, device="cpu", batch_tokens=DEFAULT_BATCH_TOKENS)
    with _server(one.translator, one.facts) as client:
        answer = client.post("/attention", json={"text": "How are you?", "prefix": "¿Cómo"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["translation"].startswith("¿Cómo")
