"""The grouped train/valid/test split's rule, and its cache's files: distinct source sentences are
ranked by a seeded hash and the lowest held out, each set at most 1/:data:`HELD_OUT_PARTS` of them.

The split is a pure function of (corpus, sizes, seed) and never puts one source sentence in two
splits, which would leak test references into training. The in-memory path keeps it as index arrays
beside the corpus cache (:func:`save_split`), so no text is stored twice; the streamed path makes the
same split in two passes (:mod:`seq2seq.data.streamed.split`). Both learn the tokenizer from an
evenly spread sample of the train split (:func:`evenly_spread`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import datasets
import numpy as np

from seq2seq.config import DataError

SPLIT_VERSION = 2  # bump when the split's rule or its cache's files change
SPLIT_FILE = "split.npz"
SPLIT_FACTS = "split.json"  # the carved sizes and the given sets' overlap with training, for the log
HELD_OUT_PARTS = 10  # a set carved out of the corpus holds at most 1/10 of its distinct sources
_BATCH = 10_000  # rows per Arrow batch when scanning the source column


def source_hashes(texts: list[str], seed: int) -> np.ndarray:
    """Seeded 64-bit hash of each source sentence, shape (N,): what the split ranks sources by."""
    key = str(seed).encode()
    return np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8, key=key).digest(), "little")
            for text in texts
        ),
        dtype=np.uint64,
        count=len(texts),
    )


def _source_hashes(dataset: datasets.Dataset, seed: int) -> np.ndarray:
    """:func:`source_hashes` of every row, shape (N,)."""
    hashes = np.empty(len(dataset), dtype=np.uint64)
    start = 0
    for batch in dataset.select_columns(["src"]).iter(batch_size=_BATCH):
        hashes[start : start + len(batch["src"])] = source_hashes(batch["src"], seed)
        start += len(batch["src"])
    return hashes


def held_out_sizes(distinct: int, valid_size: int, test_size: int) -> tuple[int, int]:
    """How many distinct sources the valid and test sets carved out of a corpus hold: each at most
    1/:data:`HELD_OUT_PARTS` of the corpus's ``distinct`` sources (at least 1 where asked for), so
    a small corpus keeps most of itself for training; the bundled corpus's 2,000 each stay 2,000."""
    cap = max(1, distinct // HELD_OUT_PARTS)
    valid, test = min(valid_size, cap), min(test_size, cap)
    if distinct <= valid + test:
        raise DataError(
            f"corpus has {distinct} distinct source sentences; holding out {valid} for validation "
            f"and {test} for testing leaves none for training: give data.valid_path and data.test_path"
        )
    return valid, test


def evenly_spread(dataset: datasets.Dataset, count: int) -> datasets.Dataset:
    """At most ``count`` rows spread evenly over ``dataset``: a file may be sorted (by length, say),
    so its first rows would be a biased sample."""
    if len(dataset) <= count:
        return dataset
    return dataset.select(np.unique(np.linspace(0, len(dataset) - 1, count).round().astype(np.int64)))


def _carve(hashes: np.ndarray, valid_size: int, test_size: int) -> dict[str, np.ndarray]:
    distinct = np.unique(hashes)  # sorted
    valid_size, test_size = held_out_sizes(len(distinct), valid_size, test_size)
    valid_end, test_end = distinct[valid_size], distinct[valid_size + test_size]
    masks = {
        "train": hashes >= test_end,
        "valid": hashes < valid_end,
        "test": (hashes >= valid_end) & (hashes < test_end),
    }
    return {name: np.flatnonzero(mask) for name, mask in masks.items()}


def split_indices(
    dataset: datasets.Dataset, valid_size: int, test_size: int, seed: int
) -> dict[str, np.ndarray]:
    """Row indices of ``train``/``valid``/``test``: ``valid_size``/``test_size`` distinct source
    sentences (at most :func:`held_out_sizes`) held out with all their translations."""
    return _carve(_source_hashes(dataset, seed), valid_size, test_size)


def save_split(
    dataset: datasets.Dataset,
    carve: dict[str, int],
    given: dict[str, datasets.Dataset],
    seed: int,
    drop_overlap: bool,
    directory: Path,
) -> None:
    """The index arrays of the three splits (a given set's are empty: it is not in ``dataset``), the
    carved sizes, and how many training pairs share their source with each given set (dropped with
    ``drop_overlap``)."""
    hashes = _source_hashes(dataset, seed)
    indices = _carve(hashes, carve["valid"], carve["test"])
    train = hashes[indices["train"]]
    overlap = {name: np.isin(train, _source_hashes(given[name], seed)) for name in given}
    if drop_overlap and overlap:
        indices["train"] = indices["train"][~np.logical_or.reduce(list(overlap.values()))]
        if not len(indices["train"]):
            raise DataError("every training pair's source is in data.valid_path or data.test_path")
    sizes = {name: len(np.unique(hashes[indices[name]])) for name in ("valid", "test")}
    counts = {name: int(overlap[name].sum()) if name in overlap else 0 for name in ("valid", "test")}
    facts = {"carved": sizes, "overlap": counts, "train_before_drop": len(train)}
    np.savez(directory / SPLIT_FILE, **indices)
    (directory / SPLIT_FACTS).write_text(json.dumps(facts))
