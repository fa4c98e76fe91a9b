"""Parallel corpus -> cleaned Arrow dataset with ``src``/``tgt`` columns, cached on disk.

The corpus (any format of :mod:`seq2seq.data.readers.sources`, read by :mod:`seq2seq.data.readers.registry`)
is streamed into an Arrow file in record batches, so it is never held in Python lists; the result is
memory-mapped. Malformed records are skipped and counted per cause; too many of them stop the
run before training (:mod:`seq2seq.data.readers.malformed`). The cache name hashes the files' bytes and
every option that changes what is read, so an edited corpus is re-read, and an unchanged one,
wherever it was copied, loads from the cache. The split is cached too: three index arrays beside
the corpus, so no text is stored twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
from datasets.table import MemoryMappedTable

from seq2seq.config import DataConfig, DataError
from seq2seq.data.cache import Caches, digest
from seq2seq.data.readers import malformed
from seq2seq.data.readers.hub import HubDataset, read_hub
from seq2seq.data.readers.registry import FEATURES, FORMATS, clean_pairs
from seq2seq.data.readers.sources import Reading, Source, locate

_FORMAT_VERSION = 4  # bump when the cleaning rules or the cache layout change, to invalidate old caches
_BATCH = 10_000  # rows per Arrow batch when writing the corpus or scanning a column
_PAIRS_FILE = "pairs.arrow"
_SPLIT_FILE = "split.npz"
_SPLIT_FACTS = "split.json"  # the carved sizes and the given sets' overlap with training, for the log
_SPLIT_VERSION = 2  # bump when the split's rule or its cache's files change
HELD_OUT_PARTS = 10  # a set carved out of the corpus holds at most 1/10 of its distinct sources
_DIGESTS_DIR = "digests"  # each corpus file's digest, kept while the file is unchanged

log = logging.getLogger("seq2seq.data")


def cache_root(cfg: DataConfig) -> Path:
    """``data.cache_dir`` as an absolute path: every cache of the data stage lives under it."""
    return Path(cfg.cache_dir).expanduser().resolve()


def caches(cfg: DataConfig) -> Caches:
    """What the builders of the data stage's caches read of ``cfg``: the folder and the lock timeout."""
    return Caches(cache_root(cfg), cfg.lock_timeout_s)


@dataclass(frozen=True)
class CorpusPlan:
    """What the corpus, split and cache steps read of a :class:`DataConfig`, taken from it once where
    preparation starts (``data.path`` located then), so each step takes the fields it uses."""

    source: Source | HubDataset  # data.path, located; or data.hub_dataset
    reading: Reading  # how records become pairs
    max_malformed_share: float
    given: dict[str, Any]  # data.valid_path and data.test_path, where given
    sizes: dict[str, int]  # data.valid_size and data.test_size: what to carve where no set is given
    split_seed: int
    drop_train_overlap: bool
    caches: Caches  # data.cache_dir and data.lock_timeout_s

    @classmethod
    def of(cls, cfg: DataConfig) -> CorpusPlan:
        """The plan of ``cfg``'s corpus; a ``data.path`` that names no corpus fails here."""
        reading = Reading.of(cfg)
        hub = HubDataset(cfg.hub_dataset, cfg.hub_config) if cfg.hub_dataset else None
        return cls(
            source=hub or locate(cfg.path, reading.columns),
            reading=reading,
            max_malformed_share=cfg.max_malformed_share,
            given={
                name: path
                for name, path in (("valid", cfg.valid_path), ("test", cfg.test_path))
                if path is not None
            },
            sizes={"valid": cfg.valid_size, "test": cfg.test_size},
            split_seed=cfg.split_seed,
            drop_train_overlap=cfg.drop_train_overlap,
            caches=caches(cfg),
        )


def _cache_name(source: Source, reading: Reading, caches: Caches) -> str:
    options = {name: getattr(reading, name) for name in FORMATS[source.format].options}
    key = [
        _FORMAT_VERSION,
        source.format,
        source.digests(caches.root / _DIGESTS_DIR),
        list(reading.columns),
        reading.direction,
        options,
    ]
    return "corpus-" + digest(json.dumps(key))


def _write_arrow(pairs: Iterator[tuple[str, str]], path: Path) -> None:
    """Stream pairs into an Arrow file, ``_BATCH`` rows per record batch, so no per-row Python
    objects are kept (``datasets``' per-example generator plus ``save_to_disk`` is far slower)."""
    schema = FEATURES.arrow_schema
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        while chunk := list(islice(pairs, _BATCH)):
            src, tgt = zip(*chunk, strict=True)
            writer.write_batch(
                pa.record_batch([pa.array(src, pa.string()), pa.array(tgt, pa.string())], schema)
            )


def _build(source: Source, reading: Reading, directory: Path) -> None:
    """Write the cleaned pairs and their counts into ``directory``; a corpus without pairs is an error."""
    tally = malformed.Tally(FORMATS[source.format].unit)
    _write_arrow(clean_pairs(source, reading, tally), directory / _PAIRS_FILE)
    stats = tally.stats()
    if stats["pairs"] == 0 and stats["malformed"]:
        raise malformed.error(stats)
    if stats["pairs"] == 0:
        raise DataError(f"corpus {', '.join(map(str, source.files))} has no {tally.unit}s")
    (directory / "stats.json").write_text(json.dumps(stats, indent=1))


def corpus_cache(source: Source, reading: Reading, caches: Caches) -> tuple[Path, dict]:
    """The corpus cache of a located corpus, built if missing (``pairs_file`` names its pairs), and
    the pair and malformed-record counts it was built with."""
    what = f"corpus cache of {', '.join(map(str, source.files))}"
    cache = caches.built(_cache_name(source, reading, caches), partial(_build, source, reading), what)
    return cache, json.loads((cache / "stats.json").read_text())


def pairs_file(cache: Path) -> Path:
    """The Arrow stream of cleaned pairs in a corpus cache (record batches of ``src``, ``tgt``)."""
    return cache / _PAIRS_FILE


def _read(source: Source | HubDataset, reading: Reading, caches: Caches) -> tuple[datasets.Dataset, dict]:
    if isinstance(source, HubDataset):
        return read_hub(source, reading)
    cache, stats = corpus_cache(source, reading, caches)
    table = MemoryMappedTable.from_file(str(cache / _PAIRS_FILE))
    return datasets.Dataset(
        table, info=datasets.DatasetInfo(features=FEATURES), fingerprint=cache.name
    ), stats


def read_corpus(plan: CorpusPlan) -> tuple[datasets.Dataset, dict]:
    """Cleaned pairs (columns ``src``, ``tgt`` in ``data.direction``) and their counts, however many
    records are malformed."""
    return _read(plan.source, plan.reading, plan.caches)


def load_corpus(plan: CorpusPlan) -> tuple[datasets.Dataset, dict]:
    """:func:`read_corpus`, stopping when more than ``data.max_malformed_share`` of it is malformed."""
    pairs, stats = read_corpus(plan)
    malformed.check(stats, plan.max_malformed_share)
    return pairs, stats


def evenly_spread(dataset: datasets.Dataset, count: int) -> datasets.Dataset:
    """At most ``count`` rows spread evenly over ``dataset``: a file may be sorted (by length, say),
    so its first rows would be a biased sample."""
    if len(dataset) <= count:
        return dataset
    return dataset.select(np.unique(np.linspace(0, len(dataset) - 1, count).round().astype(np.int64)))


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
    sentences (at most :func:`held_out_sizes`) held out with all their translations.

    Distinct sources are ranked by a seeded hash and the lowest ranks are held out, so
    the split is a pure function of (corpus, sizes, seed) and never puts one source
    sentence in two splits, which would leak test references into training.
    """
    return _carve(_source_hashes(dataset, seed), valid_size, test_size)


def _select(dataset: datasets.Dataset, indices: dict[str, np.ndarray], key: str) -> datasets.DatasetDict:
    return datasets.DatasetDict(
        {
            name: dataset.select(rows, new_fingerprint=digest(f"{key}|{name}"))
            for name, rows in indices.items()
        }
    )


def given_sets(plan: CorpusPlan) -> dict[str, datasets.Dataset]:
    """The valid and test sets that ``data.valid_path`` and ``data.test_path`` name, read as
    ``data.path`` is read (format, columns, direction, malformed lines); those not given are absent."""
    limit = plan.max_malformed_share
    return {
        name: _given_set(plan.reading, plan.caches, limit, name, path) for name, path in plan.given.items()
    }


def _given_set(reading: Reading, caches: Caches, limit: float, name: str, path: Any) -> datasets.Dataset:
    """The set read as ``data.path``, with a failure naming the set's own key instead."""
    try:
        pairs, stats = _read(locate(path, reading.columns), reading, caches)
        malformed.check(stats, limit)
        return pairs
    except DataError as err:
        raise DataError(str(err).replace("data.path", f"data.{name}_path")) from err


def held_out_split(cfg: DataConfig, name: str) -> datasets.Dataset:
    """The ``valid`` or ``test`` split as training held it out, read without the other one's file,
    which may have moved since: a given set is its file (read without ``data.path`` either); a carved
    one is the same rows of the corpus (the other set, given, carved none)."""
    path = getattr(cfg, f"{name}_path")
    if path is not None:
        return _given_set(Reading.of(cfg), caches(cfg), cfg.max_malformed_share, name, path)
    other = "test" if name == "valid" else "valid"
    if getattr(cfg, f"{other}_path") is not None:  # drop_train_overlap shapes only the train split
        cfg = replace(cfg, **{f"{other}_path": None, f"{other}_size": 0}, drop_train_overlap=False)
    return load_splits(cfg)[0][name]


def _save_split(
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
    np.savez(directory / _SPLIT_FILE, **indices)
    (directory / _SPLIT_FACTS).write_text(json.dumps(facts))


def report_carved(asked: dict[str, int], carved: dict[str, int]) -> None:
    """One log line when a set carved out of the corpus holds fewer sources than asked (a small corpus)."""
    if any(carved[name] < asked[name] for name in asked):
        log.info(
            "held out %d validation and %d test source sentences (asked %d and %d): at most 1/%d "
            "each of the corpus's distinct sources",
            carved["valid"], carved["test"], asked["valid"], asked["test"], HELD_OUT_PARTS,
        )  # fmt: skip


def _report_split(carve: dict[str, int], facts: dict, given: bool, drop_overlap: bool) -> None:
    """:func:`report_carved`, and one line on the training pairs that ``given`` sets overlap."""
    report_carved(carve, facts["carved"])
    overlap = facts["overlap"]
    if not given:
        return
    action = "dropped" if drop_overlap else "kept (data.drop_train_overlap=true drops them)"
    log.info(
        "%d of %d training pairs share their source sentence with data.valid_path, %d with "
        "data.test_path: %s",
        overlap["valid"], facts["train_before_drop"], overlap["test"], action,
    )  # fmt: skip


def load_splits(cfg: DataConfig) -> tuple[datasets.DatasetDict, dict[str, int]]:
    """:func:`split_corpus` of ``cfg``'s corpus."""
    return split_corpus(CorpusPlan.of(cfg))


def split_corpus(plan: CorpusPlan) -> tuple[datasets.DatasetDict, dict[str, int]]:
    """The corpus split into train/valid/test exactly as training sees it, plus load stats.

    A set that ``data.valid_path`` or ``data.test_path`` gives is that file; the others are carved
    out of the corpus. The split's index arrays are cached under a name derived from the corpus
    cache, the given sets and the split settings. The train split's fingerprint derives from what
    makes its rows (the given sets only when they drop rows), so a changed dev file leaves the
    tokenizer as it is; every later cache keys on the fingerprints of all three.
    """
    pairs, stats = load_corpus(plan)
    given = given_sets(plan)
    carve = {name: 0 if name in given else plan.sizes[name] for name in ("valid", "test")}
    drop = plan.drop_train_overlap
    dropped = {name: given[name]._fingerprint for name in given} if drop else {}
    train_key = json.dumps([_SPLIT_VERSION, pairs._fingerprint, carve, plan.split_seed, dropped])
    key = digest(json.dumps([train_key, {name: given[name]._fingerprint for name in given}]))
    save = partial(_save_split, pairs, carve, given, plan.split_seed, drop)
    target = plan.caches.built(f"split-{key}", save, "train/valid/test split")
    with np.load(target / _SPLIT_FILE) as saved:
        indices = {name: saved[name] for name in ("train", "valid", "test")}
    facts = json.loads((target / _SPLIT_FACTS).read_text())
    _report_split(carve, facts, bool(given), drop)
    splits = _select(pairs, indices, digest(train_key))
    return datasets.DatasetDict({**splits, **given}), stats


def references(dataset: datasets.Dataset) -> tuple[list[str], list[list[str]]]:
    """Unique sources in first-seen order and every target each one has (multi-reference BLEU)."""
    grouped: dict[str, list[str]] = {}
    for batch in dataset.select_columns(["src", "tgt"]).iter(batch_size=_BATCH):
        for src, tgt in zip(batch["src"], batch["tgt"], strict=True):
            grouped.setdefault(src, []).append(tgt)
    return list(grouped), list(grouped.values())
