"""bench/data/padding.py: the ladders of few shapes it fits to a corpus's lengths."""

from itertools import combinations

import numpy as np

from bench.data.padding import fitted_rungs
from seq2seq.data.static_shapes import StaticShapes


def test_the_fitted_rungs_pad_least_of_all_ladders_of_their_size() -> None:
    """``bench.data.padding``'s few-shape ladders: no other choice of rungs rounds the pairs up less."""
    lengths = np.random.default_rng(0).geometric(0.15, size=400).clip(2, 12)
    for count in (1, 2, 3, 4):
        fitted = fitted_rungs(lengths, count, top=12)
        assert len(fitted) == count and fitted[-1] == 12
        best = min(
            StaticShapes.of(11, 1024, rungs=(*low, 12)).rounded(lengths).sum()
            for low in combinations(range(2, 12), count - 1)
        )
        assert StaticShapes.of(11, 1024, rungs=fitted).rounded(lengths).sum() == best
