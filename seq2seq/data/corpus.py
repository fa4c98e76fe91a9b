"""Parallel corpus -> cleaned Arrow dataset with ``src``/``tgt`` columns, cached on disk.

The text is streamed line by line into an Arrow file in record batches, so the corpus is
never held in Python lists; the result is memory-mapped. Malformed lines are
skipped and counted rather than crashing a long job on one bad byte. The cache name
hashes the file's bytes and the column layout, so an edited corpus is re-read, and an
unchanged one, wherever it was copied, loads from the cache. The split is cached too:
three index arrays beside the corpus, so no text is stored twice.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterator
from functools import partial
from itertools import islice
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
from datasets.table import MemoryMappedTable

from seq2seq.config import DataConfig, DataError
from seq2seq.data.cache import build_once, digest, file_digest

log = logging.getLogger("seq2seq.data")

_FORMAT_VERSION = 3  # bump when the cleaning rules or the cache layout change, to invalidate old caches
_REPO_ROOT = Path(__file__).resolve().parents[2]  # seq2seq/data/corpus.py -> the checkout
_FEATURES = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string")})
_SUFFIXES = (".tsv", ".txt", ".csv", ".jsonl")
_BATCH = 10_000  # rows per Arrow batch when writing the corpus or scanning a column
_PAIRS_FILE = "pairs.arrow"
_SPLIT_FILE = "split.npz"


def resolve_path(path: str) -> Path:
    """Find ``path`` relative to the working dir, then to the repo root (Hydra may chdir)."""
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        if candidate.is_file():
            return candidate
        raise DataError(f"corpus file not found: {candidate}")
    for base in (Path.cwd(), _REPO_ROOT):
        if (base / candidate).is_file():
            return (base / candidate).resolve()
    raise DataError(f"corpus file not found: {path} (looked in {Path.cwd()} and {_REPO_ROOT})")


def _text_lines(path: Path, counts: Counter) -> Iterator[str]:
    """Decoded lines without line endings; a leading BOM and bad UTF-8 lines are dropped."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for number, raw in enumerate(handle):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                counts["bad_utf8"] += 1
                continue
            if number == 0:
                line = line.removeprefix("\ufeff")
            if line.strip():
                yield line


def _rows(path: Path, columns: tuple[str, ...], counts: Counter) -> Iterator[list | None]:
    """One list of fields per record, or None for a record that cannot be parsed."""
    lines = _text_lines(path, counts)
    kind = path.name.removesuffix(".gz").rsplit(".", 1)[-1]
    if kind == "csv":
        yield from csv.reader(lines)
    elif kind == "jsonl":
        for line in lines:
            try:
                record = json.loads(line)
                yield [record[column] for column in columns] if isinstance(record, dict) else None
            except (json.JSONDecodeError, KeyError):
                yield None
    else:
        for line in lines:
            yield line.split("\t")


def _clean_pairs(
    path: Path, columns: tuple[str, ...], src_col: str, tgt_col: str, counts: Counter
) -> Iterator[tuple[str, str]]:
    """(source, target) of every usable record; tallies skipped records in ``counts``."""
    src_index, tgt_index = columns.index(src_col), columns.index(tgt_col)
    for fields in _rows(path, columns, counts):
        if fields is None or len(fields) != len(columns) or not all(isinstance(f, str) for f in fields):
            counts["wrong_columns"] += 1
            continue
        src, tgt = fields[src_index].strip(), fields[tgt_index].strip()
        if not src or not tgt:
            counts["empty_side"] += 1
            continue
        counts["pairs"] += 1
        yield src, tgt


def _cache_name(path: Path, cfg: DataConfig) -> str:
    key = json.dumps([_FORMAT_VERSION, file_digest(path), list(cfg.columns), cfg.direction])
    return "corpus-" + digest(key)


def _line_stats(path: Path, counts: Counter) -> dict[str, int]:
    """Counts for ``stats.json``; logs skipped lines once and rejects a corpus without pairs."""
    by_reason = {
        f"malformed_{reason}": counts[reason] for reason in ("bad_utf8", "wrong_columns", "empty_side")
    }
    malformed = sum(by_reason.values())
    if counts["pairs"] == 0:
        detail = f"all {malformed} lines are malformed" if malformed else "it has no lines"
        raise DataError(f"corpus {path} holds no usable pairs: {detail}")
    if malformed:
        log.warning("skipped %d malformed lines of %s: %s", malformed, path, by_reason)
    return {"pairs": counts["pairs"], "malformed_lines": malformed, **by_reason}


def _write_arrow(pairs: Iterator[tuple[str, str]], path: Path) -> None:
    """Stream pairs into an Arrow file, ``_BATCH`` rows per record batch, so no per-row Python
    objects are kept (``datasets``' per-example generator plus ``save_to_disk`` took ~10x longer)."""
    schema = _FEATURES.arrow_schema
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        while chunk := list(islice(pairs, _BATCH)):
            src, tgt = zip(*chunk, strict=True)
            writer.write_batch(
                pa.record_batch([pa.array(src, pa.string()), pa.array(tgt, pa.string())], schema)
            )


def _build(path: Path, cfg: DataConfig, directory: Path) -> None:
    """Write the cleaned pairs and their counts into ``directory``."""
    counts: Counter = Counter()
    pairs = _clean_pairs(path, tuple(cfg.columns), cfg.source_lang, cfg.target_lang, counts)
    _write_arrow(pairs, directory / _PAIRS_FILE)
    stats = _line_stats(path, counts)
    (directory / "stats.json").write_text(json.dumps(stats, indent=1))


def _check_format(path: Path) -> None:
    if Path(path.name.removesuffix(".gz")).suffix not in _SUFFIXES:
        allowed = ", ".join(_SUFFIXES)
        raise DataError(f"unsupported corpus format: {path.name} (use {allowed}, optionally .gz)")


def _load_local(cfg: DataConfig) -> tuple[datasets.Dataset, dict[str, int]]:
    path = resolve_path(cfg.path)
    _check_format(path)
    target = cache_root(cfg) / _cache_name(path, cfg)
    build_once(target, partial(_build, path, cfg), f"corpus cache of {path}", cfg.lock_timeout_s)
    stats = json.loads((target / "stats.json").read_text())
    table = MemoryMappedTable.from_file(str(target / _PAIRS_FILE))
    return datasets.Dataset(
        table, info=datasets.DatasetInfo(features=_FEATURES), fingerprint=target.name
    ), stats


def cache_root(cfg: DataConfig) -> Path:
    """``data.cache_dir`` as an absolute path: every cache of the data stage lives under it."""
    return Path(cfg.cache_dir).expanduser().resolve()


def _hub_pairs(batch: dict, field: str | None, src_lang: str, tgt_lang: str) -> dict[str, list[str]]:
    if field:
        src, tgt = [row[src_lang] for row in batch[field]], [row[tgt_lang] for row in batch[field]]
    else:
        src, tgt = batch[src_lang], batch[tgt_lang]
    return {"src": [(text or "").strip() for text in src], "tgt": [(text or "").strip() for text in tgt]}


def _both_sides(batch: dict) -> list[bool]:
    return [bool(src) and bool(tgt) for src, tgt in zip(batch["src"], batch["tgt"], strict=True)]


def _load_hub(cfg: DataConfig) -> tuple[datasets.Dataset, dict[str, int]]:
    """Opt-in hub dataset mapped onto the same ``src``/``tgt`` layout as a local file."""
    raw = datasets.load_dataset(cfg.hub_dataset, cfg.hub_config, split=cfg.hub_split)
    pairs = raw.map(
        partial(
            _hub_pairs, field=cfg.hub_translation_field, src_lang=cfg.source_lang, tgt_lang=cfg.target_lang
        ),
        batched=True,
        remove_columns=raw.column_names,
        features=_FEATURES,
    )
    kept = pairs.filter(_both_sides, batched=True)
    if len(kept) == 0:
        raise DataError(f"hub dataset {cfg.hub_dataset} holds no usable {cfg.direction} pairs")
    return kept, {"pairs": len(kept), "malformed_lines": len(pairs) - len(kept)}


def load_corpus(cfg: DataConfig) -> tuple[datasets.Dataset, dict[str, int]]:
    """Cleaned pairs (columns ``src``, ``tgt`` in ``cfg.direction``) and their line counts."""
    return _load_hub(cfg) if cfg.hub_dataset else _load_local(cfg)


def _source_hashes(dataset: datasets.Dataset, seed: int) -> np.ndarray:
    """Seeded 64-bit hash of each row's source sentence, shape (N,)."""
    key = str(seed).encode()
    hashes = np.empty(len(dataset), dtype=np.uint64)
    start = 0
    for batch in dataset.select_columns(["src"]).iter(batch_size=_BATCH):
        texts = batch["src"]
        hashes[start : start + len(texts)] = [
            int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8, key=key).digest(), "little")
            for text in texts
        ]
        start += len(texts)
    return hashes


def split_indices(
    dataset: datasets.Dataset, valid_size: int, test_size: int, seed: int
) -> dict[str, np.ndarray]:
    """Row indices of ``train``/``valid``/``test``: ``valid_size``/``test_size`` distinct source
    sentences held out with all their translations.

    Distinct sources are ranked by a seeded hash and the lowest ranks are held out, so
    the split is a pure function of (corpus, sizes, seed) and never puts one source
    sentence in two splits, which would leak test references into training.
    """
    hashes = _source_hashes(dataset, seed)
    distinct = np.unique(hashes)  # sorted
    if len(distinct) <= valid_size + test_size:
        raise DataError(
            f"corpus has {len(distinct)} distinct source sentences; valid_size + test_size "
            f"({valid_size + test_size}) must leave some for training"
        )
    valid_end, test_end = distinct[valid_size], distinct[valid_size + test_size]
    masks = {
        "train": hashes >= test_end,
        "valid": hashes < valid_end,
        "test": (hashes >= valid_end) & (hashes < test_end),
    }
    return {name: np.flatnonzero(mask) for name, mask in masks.items()}


def _select(dataset: datasets.Dataset, indices: dict[str, np.ndarray], key: str) -> datasets.DatasetDict:
    return datasets.DatasetDict(
        {
            name: dataset.select(rows, new_fingerprint=digest(f"{key}|{name}"))
            for name, rows in indices.items()
        }
    )


def _save_split(dataset: datasets.Dataset, cfg: DataConfig, directory: Path) -> None:
    indices = split_indices(dataset, cfg.valid_size, cfg.test_size, cfg.split_seed)
    np.savez(directory / _SPLIT_FILE, **indices)


def load_splits(cfg: DataConfig) -> tuple[datasets.DatasetDict, dict[str, int]]:
    """The corpus split into train/valid/test exactly as training sees it, plus load stats.

    The split's index arrays are cached under a name derived from the corpus cache and the
    split settings; each split's fingerprint derives from that name, so every later cache keys on it.
    """
    pairs, stats = load_corpus(cfg)
    key = digest(f"{pairs._fingerprint}|{cfg.valid_size}|{cfg.test_size}|{cfg.split_seed}")
    target = cache_root(cfg) / f"split-{key}"
    build_once(target, partial(_save_split, pairs, cfg), "train/valid/test split", cfg.lock_timeout_s)
    with np.load(target / _SPLIT_FILE) as saved:
        indices = {name: saved[name] for name in ("train", "valid", "test")}
    return _select(pairs, indices, target.name), stats


def references(dataset: datasets.Dataset) -> tuple[list[str], list[list[str]]]:
    """Unique sources in first-seen order and every target each one has (multi-reference BLEU)."""
    grouped: dict[str, list[str]] = {}
    for batch in dataset.select_columns(["src", "tgt"]).iter(batch_size=_BATCH):
        for src, tgt in zip(batch["src"], batch["tgt"], strict=True):
            grouped.setdefault(src, []).append(tgt)
    return list(grouped), list(grouped.values())
