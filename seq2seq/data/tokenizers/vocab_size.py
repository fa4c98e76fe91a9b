"""Token lengths at any vocabulary size, and a suggested size, from one BPE trained on a sample.

BPE learns its merges greedily, one at a time, so a tokenizer trained to V tokens is the first V
tokens of one trained to more on the same text, and it encodes every sentence as the larger one's
tokens split back along the merges made after the V-th token (tests/data/tokenizers/test_vocab_size.py checks
both). One training and one encoding of a sample thus give token counts and sentence lengths at
every size.

The suggestion follows Gowda and May, "Finding the Optimal Vocabulary Size for Neural Machine
Translation" (Findings of EMNLP 2020): the largest size at which at least 95 % of the subword
types occur at least 100 times in the training data, since rarer types get too few updates to
learn useful embeddings. The types judged are the merged subwords: the special tokens and the 256
bytes are in a byte-level vocabulary of any size. Counts in the sample are scaled to the corpus.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

CANDIDATES = (500, 1000, 2000, 4000, 8000, 16000, 32000)  # sizes the suggestion chooses among
MIN_OCCURRENCES = 100  # Gowda and May's threshold: a type needs this many occurrences...
MIN_SHARE = 0.95  # ...in at least this share of the types


class MergeTree:
    """The merges of a trained byte-level BPE as id triples, in the order they were learnt."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        model = json.loads(tokenizer.to_str())["model"]
        vocab = model["vocab"]
        self.size = len(vocab)
        pairs = [merge if isinstance(merge, list) else merge.split(" ") for merge in model["merges"]]
        self.merges = np.array([(vocab[a], vocab[b], vocab[a + b]) for a, b in pairs], dtype=np.int64)
        self.first_merged = int(self.merges[:, 2].min()) if len(self.merges) else self.size  # after the bytes

    def pieces(self, size: int) -> np.ndarray:
        """How many tokens of a ``size``-token BPE each token of this one is, shape (self.size,)."""
        pieces = np.ones(self.size, dtype=np.int64)
        for left, right, merged in self.merges:  # parts are learnt before what they form
            if merged >= size:
                pieces[merged] = pieces[left] + pieces[right]
        return pieces

    def counts(self, counts: np.ndarray, size: int) -> np.ndarray:
        """Occurrences of each token of a ``size``-token BPE, from this one's ``counts``, shape (size,)."""
        counts = counts.copy()
        for left, right, merged in self.merges[::-1]:  # a token is split after all that contain it
            if merged >= size:
                counts[left] += counts[merged]
                counts[right] += counts[merged]
        return counts[:size]


def lengths(ids: list[list[int]], pieces: np.ndarray) -> np.ndarray:
    """Tokens in each sentence at the size ``pieces`` was computed for, shape (N,)."""
    sizes = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter((i for row in ids for i in row), dtype=np.int64, count=int(sizes.sum()))
    per_token = np.concatenate([[0], np.cumsum(pieces[flat])])
    ends = np.cumsum(sizes)
    return per_token[ends] - per_token[ends - sizes]


@dataclass
class Suggestion:
    """The suggested size and, for each candidate size, the share of types frequent enough."""

    size: int
    shares: dict[int, float]
    met: bool  # False: no candidate meets the rule and ``size`` is the smallest


def suggest(tree: MergeTree, ids: list[list[int]], scale: float) -> Suggestion:
    """Gowda and May's rule on the types of the sample's encoding; ``scale`` = corpus / sample sentences."""
    flat = np.fromiter((i for row in ids for i in row), dtype=np.int64)
    counts = np.bincount(flat, minlength=tree.size)
    shares = {}
    for size in (c for c in CANDIDATES if c <= tree.size):
        scaled = tree.counts(counts, size)[tree.first_merged :] * scale
        used = scaled[scaled > 0]
        shares[size] = float((used >= MIN_OCCURRENCES).mean()) if len(used) else 0.0
    meeting = [size for size, share in shares.items() if share >= MIN_SHARE]
    if meeting:
        return Suggestion(max(meeting), shares, met=True)
    return Suggestion(min(shares, default=tree.size), shares, met=False)
