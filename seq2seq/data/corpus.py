"""Parallel corpus -> cleaned Arrow dataset with ``src``/``tgt`` columns, cached on disk, and the
train/valid/test split of it that training sees.

The corpus (any format of :mod:`seq2seq.data.readers.sources`, read by :mod:`seq2seq.data.readers.registry`)
is streamed into an Arrow file in record batches, so it is never held in Python lists; the result is
memory-mapped. Malformed records are skipped and counted per cause; too many of them stop the
run before training (:mod:`seq2seq.data.readers.malformed`). The cache name hashes the files' bytes and
every option that changes what is read, so an edited corpus is re-read, and an unchanged one,
wherever it was copied, loads from the cache. The split (:mod:`seq2seq.data.split`) is cached too:
three index arrays beside the corpus, so no text is stored twice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from itertools import islice
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
from datasets.table import MemoryMappedTable

from seq2seq.config import DataConfig, DataError
from seq2seq.data.cache import Caches, digest
from seq2seq.data.readers import malformed
from seq2seq.data.readers.registry import FORMATS, clean_pairs
from seq2seq.data.readers.sources import Reading, Source, locate
from seq2seq.data.split import HELD_OUT_PARTS, SPLIT_FACTS, SPLIT_FILE, SPLIT_VERSION, save_split

_FORMAT_VERSION = 4  # bump when the cleaning rules or the cache layout change, to invalidate old caches
_FEATURES = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string")})
_BATCH = 10_000  # rows per Arrow batch when writing the corpus or scanning a column
_PAIRS_FILE = "pairs.arrow"
_DIGESTS_DIR = "digests"  # each corpus file's digest, kept while the file is unchanged

log = logging.getLogger("seq2seq.data")


@dataclass(frozen=True)
class HubDataset:
    """``data.hub_dataset`` and ``data.hub_config``: the opt-in corpus of the Hugging Face hub."""

    name: str
    config: str | None


@dataclass(frozen=True)
class CorpusPlan:
    """What the corpus, split and cache steps read of a :class:`DataConfig`, taken from it once where
    preparation starts, so each step takes the fields it uses. Every file is located then: a path
    that names no corpus fails before any cache is built."""

    source: Source | HubDataset  # data.path, or data.hub_dataset
    reading: Reading  # how records become pairs
    max_malformed_share: float
    given: dict[str, Source]  # data.valid_path and data.test_path, where given
    sizes: dict[str, int]  # data.valid_size and data.test_size: what to carve where no set is given
    split_seed: int
    drop_train_overlap: bool
    caches: Caches  # data.cache_dir and data.lock_timeout_s

    @classmethod
    def of(cls, cfg: DataConfig) -> CorpusPlan:
        """The plan of ``cfg``'s corpus."""
        reading = Reading.of(cfg)
        hub = HubDataset(cfg.hub_dataset, cfg.hub_config) if cfg.hub_dataset else None
        source = hub or locate(cfg.path, reading.columns)  # first: its failure comes before the sets'
        given = {}
        for name, path in (("valid", cfg.valid_path), ("test", cfg.test_path)):
            if path is not None:
                with _as_given(name):
                    given[name] = locate(path, reading.columns)
        return cls(
            source=source,
            reading=reading,
            max_malformed_share=cfg.max_malformed_share,
            given=given,
            sizes={"valid": cfg.valid_size, "test": cfg.test_size},
            split_seed=cfg.split_seed,
            drop_train_overlap=cfg.drop_train_overlap,
            caches=Caches.of(cfg),
        )


@contextmanager
def _as_given(name: str) -> Iterator[None]:
    """A failure reading a given set names the set's own key (``data.valid_path``), not ``data.path``."""
    try:
        yield
    except DataError as err:
        raise DataError(str(err).replace("data.path", f"data.{name}_path")) from err


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
    schema = _FEATURES.arrow_schema
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
    name = _cache_name(source, reading, caches)
    what = f"corpus cache of {', '.join(map(str, source.files))}"
    cache = caches.built(name, partial(_build, source, reading), what)
    return cache, json.loads((cache / "stats.json").read_text())


def pairs_file(cache: Path) -> Path:
    """The Arrow stream of cleaned pairs in a corpus cache (record batches of ``src``, ``tgt``)."""
    return cache / _PAIRS_FILE


def _hub_pairs(batch: dict, field: str | None, src_lang: str, tgt_lang: str) -> dict[str, list[str]]:
    """Both languages' texts: their columns, or their keys in ``field`` where there are none (as locally)."""
    if field and not (src_lang in batch and tgt_lang in batch):
        src, tgt = [row[src_lang] for row in batch[field]], [row[tgt_lang] for row in batch[field]]
    else:
        src, tgt = batch[src_lang], batch[tgt_lang]
    return {"src": [(text or "").strip() for text in src], "tgt": [(text or "").strip() for text in tgt]}


def _both_sides(batch: dict) -> list[bool]:
    return [bool(src) and bool(tgt) for src, tgt in zip(batch["src"], batch["tgt"], strict=True)]


def _read_hub(hub: HubDataset, reading: Reading) -> tuple[datasets.Dataset, dict[str, int]]:
    """Opt-in hub dataset mapped onto the same ``src``/``tgt`` layout as a local file."""
    raw = datasets.load_dataset(hub.name, hub.config, split=reading.hub_split)
    field, langs = reading.hub_translation_field, (reading.source_lang, reading.target_lang)
    pairs = raw.map(
        partial(_hub_pairs, field=field, src_lang=langs[0], tgt_lang=langs[1]),
        batched=True,
        remove_columns=raw.column_names,
        features=_FEATURES,
    )
    kept = pairs.filter(_both_sides, batched=True)
    if len(kept) == 0:
        raise DataError(f"hub dataset {hub.name} holds no usable {reading.direction} pairs")
    empty = len(pairs) - len(kept)  # rows lacking a side: dropped, not held to max_malformed_share
    return kept, {"pairs": len(kept), "malformed_lines": empty, "malformed": {}, "unit": "row"}


def read_corpus(plan: CorpusPlan) -> tuple[datasets.Dataset, dict]:
    """Cleaned pairs (columns ``src``, ``tgt`` in ``data.direction``) and their counts, however many
    records are malformed."""
    if isinstance(plan.source, HubDataset):
        return _read_hub(plan.source, plan.reading)
    cache, stats = corpus_cache(plan.source, plan.reading, plan.caches)
    table = MemoryMappedTable.from_file(str(cache / _PAIRS_FILE))
    return datasets.Dataset(
        table, info=datasets.DatasetInfo(features=_FEATURES), fingerprint=cache.name
    ), stats


def load_corpus(plan: CorpusPlan) -> tuple[datasets.Dataset, dict]:
    """:func:`read_corpus`, stopping when more than ``data.max_malformed_share`` of it is malformed."""
    pairs, stats = read_corpus(plan)
    malformed.check(stats, plan.max_malformed_share)
    return pairs, stats


def given_sets(plan: CorpusPlan) -> dict[str, datasets.Dataset]:
    """The valid and test sets that ``data.valid_path`` and ``data.test_path`` name, read as
    ``data.path`` is read (format, columns, direction, malformed lines); those not given are absent."""
    sets = {}
    for name, source in plan.given.items():
        with _as_given(name):
            sets[name] = load_corpus(replace(plan, source=source))[0]
    return sets


def held_out_split(cfg: DataConfig, name: str) -> datasets.Dataset:
    """The ``valid`` or ``test`` split as training held it out, read without the other one's file,
    which may have moved since: a given set is its file, read as ``data.path`` is but without it; a
    carved one is the same rows of the corpus (the other set, given, carved none)."""
    path, other = getattr(cfg, f"{name}_path"), "test" if name == "valid" else "valid"
    if path is not None:
        alone = {"path": path, "hub_dataset": None, "hub_config": None, "drop_train_overlap": False}
        with _as_given(name):
            return load_corpus(CorpusPlan.of(replace(cfg, **alone, valid_path=None, test_path=None)))[0]
    if getattr(cfg, f"{other}_path") is not None:  # drop_train_overlap shapes only the train split
        cfg = replace(cfg, **{f"{other}_path": None, f"{other}_size": 0}, drop_train_overlap=False)
    return load_splits(cfg)[0][name]


def _select(dataset: datasets.Dataset, indices: dict[str, np.ndarray], key: str) -> datasets.DatasetDict:
    return datasets.DatasetDict(
        {
            name: dataset.select(rows, new_fingerprint=digest(f"{key}|{name}"))
            for name, rows in indices.items()
        }
    )


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
    train_key = json.dumps([SPLIT_VERSION, pairs._fingerprint, carve, plan.split_seed, dropped])
    key = digest(json.dumps([train_key, {name: given[name]._fingerprint for name in given}]))
    save = partial(save_split, pairs, carve, given, plan.split_seed, drop)
    target = plan.caches.built(f"split-{key}", save, "train/valid/test split")
    with np.load(target / SPLIT_FILE) as saved:
        indices = {name: saved[name] for name in ("train", "valid", "test")}
    facts = json.loads((target / SPLIT_FACTS).read_text())
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
