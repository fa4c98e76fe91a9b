"""The train/valid/test split of :func:`seq2seq.data.split.split_indices`, made in two passes over
the corpus file in memory that does not grow with it: the same rows in every split, in corpus order.

The first pass keeps only the lowest distinct source hashes (with how many rows carry each) that
:func:`seq2seq.data.split.held_out_sizes` needs, which fix both thresholds and the size of the
train split; the second writes each split's text: the train rows as text shards of
``shard_pairs`` rows, the held-out rows whole, and the tokenizer's sample (the rows
:func:`seq2seq.data.split.evenly_spread` would pick).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from seq2seq.data.split import HELD_OUT_PARTS, held_out_sizes, source_hashes

log = logging.getLogger("seq2seq.data")

SPLIT_FILE = "split.json"
SAMPLE_FILE = "sample.arrow"
_PROGRESS_EVERY = 1_000_000  # rows between progress lines of a pass


@dataclass(frozen=True)
class SplitSettings:
    """What shapes the streamed split, in its cache key's order: ``data.valid_size``, ``data.test_size``,
    ``data.split_seed``, ``data.tokenizer_max_pairs`` (the tokenizer's sample) and ``data.shard_pairs``."""

    valid_size: int
    test_size: int
    seed: int
    sample_pairs: int
    shard_pairs: int


def text_shard(index: int) -> str:
    return f"train-text-{index:05d}.arrow"


def held_out_file(name: str) -> str:
    return f"{name}.arrow"


def read_batches(path: Path) -> Iterator[pa.RecordBatch]:
    """The record batches of an Arrow stream file, read (not memory-mapped) one at a time."""
    with pa.OSFile(str(path)) as source, pa.ipc.open_stream(source) as reader:
        yield from reader


def _lowest_distinct(pairs: Path, keep: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The ``keep`` lowest distinct source hashes, the rows holding each, and the corpus's rows."""
    lowest, counts, rows = np.empty(0, np.uint64), np.empty(0, np.int64), 0
    for batch in read_batches(pairs):
        hashes, batch_counts = np.unique(
            source_hashes(batch.column("src").to_pylist(), seed), return_counts=True
        )
        merged, where = np.unique(np.concatenate([lowest, hashes]), return_inverse=True)
        total = np.bincount(where, weights=np.concatenate([counts, batch_counts]), minlength=len(merged))
        lowest, counts = merged[:keep], total[:keep].astype(np.int64)
        previous, rows = rows, rows + batch.num_rows
        if rows // _PROGRESS_EVERY > previous // _PROGRESS_EVERY:
            log.info("split, first pass: %d pairs", rows)
    return lowest, counts, rows


def _sample_rows(train_rows: int, count: int) -> np.ndarray:
    """Positions in the train split of the tokenizer's sample, as ``evenly_spread`` picks them."""
    if train_rows <= count:
        return np.arange(train_rows, dtype=np.int64)
    return np.unique(np.linspace(0, train_rows - 1, count).round().astype(np.int64))


class _ShardWriter:
    """Train text split into files of ``shard_pairs`` rows each."""

    def __init__(self, directory: Path, schema: pa.Schema, shard_pairs: int) -> None:
        self.directory, self.schema, self.shard_pairs = directory, schema, shard_pairs
        self.rows: list[int] = []
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._sink: pa.OSFile | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        while batch.num_rows:
            if not self.rows or self.rows[-1] == self.shard_pairs:
                self._next()
            take = min(batch.num_rows, self.shard_pairs - self.rows[-1])
            self._writer.write_batch(batch.slice(0, take))
            self.rows[-1] += take
            batch = batch.slice(take)

    def _next(self) -> None:
        self.close()
        self._sink = pa.OSFile(str(self.directory / text_shard(len(self.rows))), "wb")
        self._writer = pa.ipc.new_stream(self._sink, self.schema)
        self.rows.append(0)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None


def write_split(pairs: Path, settings: SplitSettings, directory: Path) -> None:
    """Write the split of the corpus stream ``pairs`` into ``directory`` (see the module's docstring)."""
    # Enough of the lowest hashes to size the held-out sets as held_out_sizes does: fewer distinct
    # sources than this are all kept and counted; more leave both sizes as asked.
    keep = HELD_OUT_PARTS * (max(settings.valid_size, settings.test_size) + 1)
    lowest, counts, rows = _lowest_distinct(pairs, keep, settings.seed)
    valid_size, test_size = held_out_sizes(len(lowest), settings.valid_size, settings.test_size)
    held = valid_size + test_size
    valid_end, test_end = lowest[valid_size], lowest[held]
    train_rows = rows - int(counts[:held].sum())
    sample = _sample_rows(train_rows, settings.sample_pairs)
    schema = next(read_batches(pairs)).schema
    shards = _ShardWriter(directory, schema, settings.shard_pairs)
    sinks = {name: pa.OSFile(str(directory / held_out_file(name)), "wb") for name in ("valid", "test")}
    sinks["sample"] = pa.OSFile(str(directory / SAMPLE_FILE), "wb")
    writers = {name: pa.ipc.new_stream(sink, schema) for name, sink in sinks.items()}
    seen = 0  # train rows written so far
    for batch in read_batches(pairs):
        hashes = source_hashes(batch.column("src").to_pylist(), settings.seed)
        train = hashes >= test_end
        writers["valid"].write_batch(batch.filter(pa.array(hashes < valid_end)))
        writers["test"].write_batch(batch.filter(pa.array((hashes >= valid_end) & ~train)))
        kept = batch.filter(pa.array(train))
        shards.write(kept)
        picked = sample[np.searchsorted(sample, seen) : np.searchsorted(sample, seen + kept.num_rows)] - seen
        writers["sample"].write_batch(kept.take(pa.array(picked)))
        seen += kept.num_rows
    shards.close()
    for name, writer in writers.items():
        writer.close()
        sinks[name].close()
    facts = {"train": train_rows, "shards": shards.rows, "carved": {"valid": valid_size, "test": test_size}}
    (directory / SPLIT_FILE).write_text(json.dumps(facts))
