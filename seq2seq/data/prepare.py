"""The data a run trains on, in one shape whichever path builds it: the tokenizer, the splits as ids,
their lengths and counts (:class:`PreparedData`).

The in-memory path builds its caches here: the corpus and its split (:mod:`seq2seq.data.corpus`),
the tokenizer, and the ids of every split; ``data.streaming`` builds the sharded store
(:mod:`seq2seq.data.streamed.build`) and keeps the training pairs there. Every cache is named by
its inputs (the corpus bytes, the split settings, the tokenizer settings), so a second run re-trains
and re-encodes nothing, a copied corpus reuses its caches, and a changed input never reuses a
stale one. Every process of a distributed run prepares; one process per cache directory builds
each cache and the others wait for it (:func:`seq2seq.data.cache.build_once`), so all ranks load
the same files, the tokenizer included.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from itertools import chain
from pathlib import Path

import datasets
import numpy as np

from seq2seq.config import DataConfig, DataError
from seq2seq.data import batching, corpus, encoded
from seq2seq.data.cache import digest
from seq2seq.data.corpus import CorpusPlan
from seq2seq.data.split import evenly_spread
from seq2seq.data.streamed import build
from seq2seq.data.streamed.batches import StreamedPairs
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer, config_key

log = logging.getLogger("seq2seq.data")

_ENCODING_VERSION = 1  # bump when the encoded layout changes
LONG_SHARE_WARNING = 0.01  # warn when more of the training pairs than this exceed max_length


@dataclass(frozen=True)
class PreparedData:
    """What training reads, built in memory or streamed.

    ``splits`` hold ids (``src_ids``, ``tgt_ids``, ``length``) of the pairs training uses, and
    ``lengths`` their padded lengths as collated; with ``data.streaming`` they hold valid and test
    only, and ``streamed`` the training pairs. ``raw_splits`` hold the text of every pair, for BLEU
    over every held-out sentence.
    """

    tokenizer: TranslationTokenizer
    splits: datasets.DatasetDict
    raw_splits: datasets.DatasetDict
    lengths: dict[str, np.ndarray]
    stats: dict[str, int | float]
    streamed: StreamedPairs | None = None


def prepare(cfg: DataConfig, tokenizer: TranslationTokenizer | None) -> PreparedData:
    """Load every cached step of ``cfg``'s data, building what is missing.

    ``tokenizer``: a checkpoint's or ``data.tokenizer_file``'s; None: one learnt from the train split.
    """
    plan = CorpusPlan.of(cfg)
    return _streamed(cfg, plan, tokenizer) if cfg.streaming else _in_memory(cfg, plan, tokenizer)


def _in_memory(cfg: DataConfig, plan: CorpusPlan, tokenizer: TranslationTokenizer | None) -> PreparedData:
    """The corpus split (memory-mapped text), the tokenizer, and the ids of every split, each a cache."""
    raw, corpus_stats = corpus.split_corpus(plan)
    caches = plan.caches
    if tokenizer is None:
        train = raw["train"]
        tokenizer_key = "tokenizer-" + digest(
            f"{config_key(cfg.vocab_size, cfg.shared_vocab)}|"
            f"{min(len(train), cfg.tokenizer_max_pairs)}|{train._fingerprint}"
        )
        learn = partial(_train_tokenizer, train, cfg.tokenizer_max_pairs, cfg.vocab_size, cfg.shared_vocab)
        tokenizer = TranslationTokenizer.load(caches.built(tokenizer_key, learn, "tokenizer"))
    else:
        tokenizer_key = f"given-{digest(json.dumps(tokenizer.to_dict(), sort_keys=True))}"
    texts = "|".join(split._fingerprint for split in raw.values())  # a given dev file's among them
    encoded_dir = caches.built(
        f"encoded-{digest(f'{_ENCODING_VERSION}|{tokenizer_key}|{texts}')}",
        partial(encoded.encode_splits, raw, tokenizer),
        "token ids of every split",
    )
    splits, lengths, too_long = _within_max_length(
        {name: encoded.load_split(encoded_dir, name) for name in raw}, cfg.max_length, cfg.too_long
    )
    counts = {name: len(split) for name, split in splits.items()}
    stats = _stats(corpus_stats["malformed_lines"], len(raw["train"]), too_long, counts)
    _report_too_long(stats, cfg.max_length, cfg.too_long)
    log.info("data ready: %s", stats)
    return PreparedData(tokenizer, splits, raw, lengths, stats)


def _streamed(cfg: DataConfig, plan: CorpusPlan, tokenizer: TranslationTokenizer | None) -> PreparedData:
    """The held-out splits as without streaming; the training pairs stay in the sharded store."""
    data = build.open_store(plan, build.StoreSettings.of(cfg), tokenizer=tokenizer)
    held_out = {name: encoded.load_split(data.held_out_ids, name) for name in build.HELD_OUT}
    splits, lengths, too_long = _within_max_length(held_out, cfg.max_length, cfg.too_long)
    rows, over = data.store.rows, data.store.too_long(cfg.max_length)
    train_pairs = rows - over if cfg.too_long == "drop" else rows
    counts = {"train": train_pairs, **{name: len(split) for name, split in splits.items()}}
    stats = _stats(data.corpus_stats["malformed_lines"], rows, {"train": over, **too_long}, counts)
    _report_too_long(stats, cfg.max_length, cfg.too_long)
    log.info("data ready (streamed from %s): %s", data.store.root, stats)
    return PreparedData(data.tokenizer, splits, data.held_out(), lengths, stats, StreamedPairs(data.store))


def _texts(dataset: datasets.Dataset, column: str) -> Iterator[str]:
    """Stream one text column in Arrow batches instead of materialising it."""
    return chain.from_iterable(batch[column] for batch in dataset.select_columns([column]).iter(10_000))


def _train_tokenizer(
    train: datasets.Dataset, max_pairs: int, vocab_size: int, shared: bool, directory: Path
) -> None:
    """Tokenizer of the train split only, so held-out text never shapes the vocabulary.

    On a corpus of millions of pairs, an evenly spread sample of a million (the file may be sorted,
    by length for one) learns nearly the same merges at a fraction of the time and memory.
    """
    train = evenly_spread(train, max_pairs)
    log.info("training a %d-token BPE tokenizer on %d pairs", vocab_size, len(train))
    tokenizer = TranslationTokenizer.train(_texts(train, "src"), _texts(train, "tgt"), vocab_size, shared)
    tokenizer.save(directory)


def _within_max_length(
    loaded: dict[str, datasets.Dataset], max_length: int, too_long: str
) -> tuple[datasets.DatasetDict, dict[str, np.ndarray], dict[str, int]]:
    """Each split as training uses it, its pairs' padded lengths as collated, and how many of its
    pairs exceed ``max_length``.

    The lengths are read from the whole memory-mapped column: reading them from the selected
    dataset would gather every column of every kept row into memory first.
    """
    splits, lengths, counts = {}, {}, {}
    for name, dataset in loaded.items():
        length = encoded.lengths(dataset)
        over = batching.too_long(length, max_length)
        counts[name] = int(over.sum())
        if too_long == "truncate":
            splits[name], lengths[name] = dataset, np.minimum(length, max_length + 1)
        elif counts[name] == 0:
            splits[name], lengths[name] = dataset, length
        else:
            keep = np.flatnonzero(~over)
            fingerprint = digest(f"{dataset._fingerprint}|max_length={max_length}")
            splits[name], lengths[name] = dataset.select(keep, new_fingerprint=fingerprint), length[keep]
    return datasets.DatasetDict(splits), lengths, counts


def _stats(malformed_lines: int, train_rows: int, too_long: dict[str, int], pairs: dict[str, int]) -> dict:
    """The counts ``data ready`` logs: ``too_long`` and ``pairs`` per split, ``train`` first."""
    return {
        "malformed_lines": malformed_lines,
        "too_long_pairs": sum(too_long.values()),
        "too_long_train_pairs": too_long["train"],
        "too_long_train_share": too_long["train"] / max(1, train_rows),
        **{f"{name}_pairs": count for name, count in pairs.items()},
    }


def _report_too_long(stats: dict, max_length: int, too_long: str) -> None:
    """A log line on the pairs over ``max_length``; a :class:`DataError` where no pair is left to
    train on, which would end the run at once with no checkpoint."""
    count, share = stats["too_long_train_pairs"], stats["too_long_train_share"]
    if stats["train_pairs"] == 0 and count:
        raise DataError(
            f"data.max_length={max_length} drops all {count} training pairs, each longer: "
            "raise it, or set data.too_long=truncate"
        )
    action = "dropped" if too_long == "drop" else "truncated"
    line = "%d training pairs (%.2f%%) exceed data.max_length=%d tokens and are %s (data.too_long)"
    args = (count, 100 * share, max_length, action)
    if share > LONG_SHARE_WARNING:
        log.warning(line + ": check max_length against this corpus", *args)
    else:
        log.info(line, *args)
