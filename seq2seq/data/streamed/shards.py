"""The sharded id store of ``data.streaming``: one folder per shard, read one block at a time.

A shard holds ``ids.arrow``, an Arrow IPC file whose record batches are the store's blocks (the
id lists of both sides, 16-bit where the vocabulary fits), ``lengths.u16``, the padded length of
each pair (:func:`seq2seq.data.batching.pair_lengths`, capped at 65535) as raw little-endian
integers, and ``meta.json``. The manifest lists every shard's blocks and the length histogram.
Blocks are read with positioned reads into buffers that are freed after use, never memory-mapped,
so what a process has read does not stay in its resident memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seq2seq.data.batching import pair_lengths

IDS_FILE, LENGTHS_FILE, META_FILE, MANIFEST_FILE = "ids.arrow", "lengths.u16", "meta.json", "manifest.json"
_LENGTH_TYPE = np.dtype("<u2")
_LENGTH_CAP = np.iinfo(_LENGTH_TYPE).max
_OPEN_FILES = 64  # shard files a reader keeps open
_BLOCKS_READ = 16  # blocks whose lengths are read at once when counting them


def id_type(vocab_size: int) -> pa.DataType:
    """The narrowest Arrow integer type that holds every id of a vocabulary this large."""
    return pa.uint16() if vocab_size <= 2**16 else pa.uint32()


def id_lists(rows: list[list[int]], values_type: pa.DataType) -> pa.ListArray:
    """Arrow ``list<values_type>`` of ``rows`` built from one flat array and its offsets."""
    sizes = np.fromiter(map(len, rows), dtype=np.int32, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    values = np.fromiter(
        chain.from_iterable(rows), dtype=values_type.to_pandas_dtype(), count=int(offsets[-1])
    )
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, values_type))


def write_shard(directory: Path, blocks: Iterable[tuple[pa.ListArray, pa.ListArray]]) -> None:
    """Write one shard into ``directory``: each (source ids, target ids) of ``blocks`` one block."""
    blocks = iter(blocks)
    first = next(blocks)
    values_type = first[0].type.value_type
    schema = pa.schema([("src_ids", pa.list_(values_type)), ("tgt_ids", pa.list_(values_type))])
    sizes, histogram = [], np.zeros(_LENGTH_CAP + 1, dtype=np.int64)
    with (
        pa.OSFile(str(directory / IDS_FILE), "wb") as sink,
        pa.ipc.new_file(sink, schema) as writer,
        (directory / LENGTHS_FILE).open("wb") as lengths_file,
    ):
        for src, tgt in chain([first], blocks):
            writer.write_batch(pa.record_batch([src, tgt], schema))
            src_len, tgt_len = (pc.list_value_length(side).to_numpy().astype(np.int64) for side in (src, tgt))
            lengths = np.minimum(pair_lengths(src_len, tgt_len), _LENGTH_CAP).astype(_LENGTH_TYPE)
            lengths_file.write(lengths.tobytes())
            histogram += np.bincount(lengths, minlength=len(histogram))
            sizes.append(len(src))
    top = int(np.flatnonzero(histogram)[-1]) + 1 if histogram.any() else 0
    meta = {"blocks": sizes, "histogram": histogram[:top].tolist(), "id_type": str(values_type)}
    (directory / META_FILE).write_text(json.dumps(meta))


def write_manifest(store: Path, shards: list[Path], directory: Path) -> None:
    """``manifest.json`` in ``directory``: every shard's blocks (in order) and the length histogram."""
    metas = [json.loads((shard / META_FILE).read_text()) for shard in shards]
    top = max((len(meta["histogram"]) for meta in metas), default=0)
    histogram = np.zeros(top, dtype=np.int64)
    for meta in metas:
        histogram[: len(meta["histogram"])] += meta["histogram"]
    manifest = {
        "shards": [
            {"name": str(s.relative_to(store)), "rows": sum(m["blocks"]), "blocks": m["blocks"]}
            for s, m in zip(shards, metas, strict=True)
        ],
        "rows": int(histogram.sum()),
        "histogram": histogram.tolist(),  # pairs of each padded length, uncapped by data.max_length
    }
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest))


@dataclass(frozen=True)
class Store:
    """A built store: where each block lies. Its arrays grow with the blocks, not with the pairs."""

    root: Path
    shard_names: tuple[str, ...]
    block_shard: np.ndarray  # (blocks,) the shard of each block
    block_index: np.ndarray  # (blocks,) the block's record batch within its shard
    block_start: np.ndarray  # (blocks + 1,) the first row of each block in the store; then the row count
    histogram: np.ndarray  # (longest + 1,) pairs of each padded length
    _block_histograms: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def open(cls, root: Path, manifest_dir: Path) -> Store:
        manifest = json.loads((manifest_dir / MANIFEST_FILE).read_text())
        sizes = [size for shard in manifest["shards"] for size in shard["blocks"]]
        shard_of = [i for i, shard in enumerate(manifest["shards"]) for _ in shard["blocks"]]
        index = [j for shard in manifest["shards"] for j in range(len(shard["blocks"]))]
        start = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=start[1:])
        return cls(
            root,
            tuple(shard["name"] for shard in manifest["shards"]),
            np.asarray(shard_of, dtype=np.int32),
            np.asarray(index, dtype=np.int32),
            start,
            np.asarray(manifest["histogram"], dtype=np.int64),
        )

    @property
    def rows(self) -> int:
        return int(self.block_start[-1])

    @property
    def blocks(self) -> int:
        return len(self.block_shard)

    def too_long(self, max_length: int) -> int:
        """Pairs with a side over ``max_length`` tokens (:func:`seq2seq.data.batching.too_long`)."""
        return int(self.histogram[max_length + 2 :].sum())

    def block_histograms(self, top: int) -> np.ndarray:
        """Pairs of each padded length in each block, a length over ``top`` counted as ``top``: shape
        (blocks, top + 1), computed once per ``top`` from the length files (2 bytes a pair, read
        ``_BLOCKS_READ`` blocks at a time). An epoch's batch count follows from these without reading
        any lengths."""
        if top not in self._block_histograms:
            width = top + 1
            histograms = np.zeros((self.blocks, width), dtype=np.int32)
            for shard, name in enumerate(self.shard_names):
                in_shard = np.flatnonzero(self.block_shard == shard)
                for at in range(0, len(in_shard), _BLOCKS_READ):
                    blocks = in_shard[at : at + _BLOCKS_READ]
                    rows = self.block_start[blocks[0] : blocks[-1] + 2]
                    skip = int(rows[0] - self.block_start[in_shard[0]]) * _LENGTH_TYPE.itemsize
                    path = self.root / name / LENGTHS_FILE
                    lengths = np.fromfile(
                        path, dtype=_LENGTH_TYPE, count=int(rows[-1] - rows[0]), offset=skip
                    )
                    cells = np.repeat(np.arange(len(blocks)) * width, np.diff(rows)) + np.minimum(
                        lengths, top
                    )
                    counts = np.bincount(cells, minlength=len(blocks) * width)
                    histograms[blocks] = counts.reshape(-1, width)
            self._block_histograms[top] = histograms
        return self._block_histograms[top]

    def block_lengths(self, block: int) -> np.ndarray:
        """Padded lengths of the pairs of ``block``, shape (rows of the block,)."""
        shard = int(self.block_shard[block])
        first_in_shard = int(self.block_start[np.searchsorted(self.block_shard, shard)])
        count = int(self.block_start[block + 1] - self.block_start[block])
        skip = (int(self.block_start[block]) - first_in_shard) * _LENGTH_TYPE.itemsize
        path = self.root / self.shard_names[shard] / LENGTHS_FILE
        return np.fromfile(path, dtype=_LENGTH_TYPE, count=count, offset=skip).astype(np.int64)


class BlockReader:
    """Reads blocks of a :class:`Store` with positioned reads; each process opens its own files."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._files: dict[int, pa.ipc.RecordBatchFileReader] = {}
        self._pid = os.getpid()

    def read(self, block: int) -> pa.RecordBatch:
        """The ``src_ids``/``tgt_ids`` of ``block``, in buffers of Arrow's memory pool."""
        if self._pid != os.getpid():  # a forked loader worker: never share the parent's handles
            self._files, self._pid = {}, os.getpid()
        shard = int(self.store.block_shard[block])
        if shard not in self._files:
            if len(self._files) >= _OPEN_FILES:
                self._files.clear()
            path = self.store.root / self.store.shard_names[shard] / IDS_FILE
            self._files[shard] = pa.ipc.open_file(pa.OSFile(str(path)))
        return self._files[shard].get_batch(int(self.store.block_index[block]))
