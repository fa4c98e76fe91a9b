"""One BPE stands for every smaller one: split back along its later merges, its encoding is exactly
what a BPE trained to the smaller size produces; and the vocabulary-size rule on top of it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer
from seq2seq.data.tokenizers.vocab_size import CANDIDATES, MergeTree, lengths, suggest
from tests.helpers.tiny import CORPUS

SMALL, LARGE = 400, 1200


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [text for line in CORPUS.read_text(encoding="utf-8").splitlines() for text in line.split("\t")]


def _bpe(texts: list[str], size: int) -> TranslationTokenizer:
    return TranslationTokenizer.train(iter(texts), iter([]), size, shared=True)


def test_a_smaller_bpe_is_the_larger_one_split_back(texts: list[str]) -> None:
    small, large = _bpe(texts, SMALL), _bpe(texts, LARGE)
    small_vocab = json.loads(small.src.to_str())["model"]["vocab"]
    large_vocab = json.loads(large.src.to_str())["model"]["vocab"]
    assert len(large_vocab) == LARGE and all(large_vocab[token] == i for token, i in small_vocab.items())

    tree = MergeTree(large.src)
    small_ids, large_ids = small.encode_source(texts), large.encode_source(texts)
    assert lengths(large_ids, tree.pieces(SMALL)).tolist() == [len(row) for row in small_ids]
    large_counts = np.bincount([i for row in large_ids for i in row], minlength=LARGE)
    small_counts = np.bincount([i for row in small_ids for i in row], minlength=SMALL)
    assert tree.counts(large_counts, SMALL).tolist() == small_counts.tolist()
    assert lengths(large_ids, tree.pieces(LARGE)).tolist() == [len(row) for row in large_ids]


def test_the_suggestion_is_the_largest_size_whose_types_are_frequent_enough(texts: list[str]) -> None:
    tokenizer = _bpe(texts, LARGE)
    tree, ids = MergeTree(tokenizer.src), tokenizer.encode_source(texts)
    few = suggest(tree, ids, scale=1.0)  # 600 sentences: no size has 95 % of its types 100 times
    assert not few.met and few.size == CANDIDATES[0] and list(few.shares) == [500, 1000]
    assert few.shares[500] > few.shares[1000]  # the more types, the rarer each
    many = suggest(tree, ids, scale=1e6)  # the same text a million times over: every type is frequent
    assert many.met and many.size == 1000 and many.shares == {500: 1.0, 1000: 1.0}
    threshold = suggest(tree, ids, scale=100 / 3)  # types seen 3+ times in the sample pass
    assert threshold.shares[500] >= 0.95 > threshold.shares[1000] and threshold.size == 500
