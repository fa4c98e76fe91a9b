"""Byte-level BPE: exact round trips on real Spanish/English text, special ids, persistence."""

from __future__ import annotations

from itertools import chain
from pathlib import Path

import pytest

from seq2seq.config import ModelConfig
from seq2seq.data.tokenizers.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    TranslationTokenizer,
)
from seq2seq.model import Transformer

TINY = Path(__file__).parents[2] / "fixtures" / "tiny.tsv"


def _pairs() -> tuple[list[str], list[str]]:
    rows = [line.split("\t") for line in TINY.read_text(encoding="utf-8").splitlines()]
    return [en for en, _ in rows], [es for _, es in rows]


@pytest.fixture(scope="module", params=[True, False], ids=["shared", "separate"])
def trained(request: pytest.FixtureRequest) -> TranslationTokenizer:
    sources, targets = _pairs()
    return TranslationTokenizer.train(iter(sources), iter(targets), vocab_size=400, shared=request.param)


def test_special_ids_are_fixed(trained: TranslationTokenizer) -> None:
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    for side in (trained.src, trained.tgt):
        assert [side.token_to_id(token) for token in SPECIAL_TOKENS] == [0, 1, 2, 3]


def test_round_trip_is_exact_on_real_lines(trained: TranslationTokenizer) -> None:
    sources, targets = _pairs()
    assert any(ch in "".join(targets) for ch in "¿¡ñáéíóú")
    assert any("'" in text for text in sources) and any(ch.isdigit() for ch in "".join(sources))
    assert trained.decode_source(trained.encode_source(sources)) == sources
    assert trained.decode_target(trained.encode_target(targets)) == targets


def test_unseen_characters_round_trip_without_unk(trained: TranslationTokenizer) -> None:
    texts = ["¿Qué tal? 😀 — naïve façade, 東京!", "  doble  espacio "]
    ids = trained.encode_target(texts)
    assert UNK_ID not in chain.from_iterable(ids)
    assert trained.decode_target(ids) == texts


def test_encode_adds_no_specials_and_decode_skips_them(trained: TranslationTokenizer) -> None:
    ids = trained.encode_target(["¡Hola, mundo!"])[0]
    assert not {PAD_ID, BOS_ID, EOS_ID} & set(ids)
    assert trained.decode_target([[BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]]) == ["¡Hola, mundo!"]


def test_vocab_sizes_and_sharing(trained: TranslationTokenizer) -> None:
    assert trained.shared == (trained.src is trained.tgt)
    assert trained.src_vocab_size == 400 and trained.tgt_vocab_size == 400


def test_save_load_and_dict_round_trip(trained: TranslationTokenizer, tmp_path: Path) -> None:
    trained.save(tmp_path)
    expected = ["tokenizer.json"] if trained.shared else ["tokenizer.src.json", "tokenizer.tgt.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == expected
    text = ["¿Dónde está el baño?"]
    for restored in (TranslationTokenizer.load(tmp_path), TranslationTokenizer.from_dict(trained.to_dict())):
        assert restored.shared == trained.shared
        assert restored.encode_target(text) == trained.encode_target(text)
        assert restored.encode_source(text) == trained.encode_source(text)


def test_the_model_reads_the_ids_the_tokenizer_gives_its_special_tokens(trained: TranslationTokenizer):
    model = Transformer(ModelConfig(d_model=16, n_heads=2), trained.src_vocab_size, trained.tgt_vocab_size)
    for side in (trained.src, trained.tgt):
        ids = [side.token_to_id(token) for token in ("<pad>", "<s>", "</s>")]
        assert ids == [model.pad_id, model.bos_id, model.eos_id]
