"""Sharded id stores of any size for the streaming tests, written without a tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from seq2seq.data.streamed.shards import Store, write_manifest, write_shard

MAX_LENGTH = 64  # the streaming tests' data.max_length


def _id_lists(rng: np.random.Generator, count: int, longest: int) -> pa.ListArray:
    """``count`` random id lists of 1 to ``longest`` - 1 ids, built as flat arrays (fast at millions)."""
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(rng.integers(1, longest, size=count), out=offsets[1:])
    values = rng.integers(4, 300, size=int(offsets[-1])).astype(np.uint16)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def make_store(
    root: Path, rows: int, shard_pairs: int, block_rows: int, longest: int = 40, seed: int = 0
) -> Store:
    """A store of ``rows`` random pairs in shards and blocks of these sizes."""
    rng = np.random.default_rng(seed)
    shards = []
    for index, first in enumerate(range(0, rows, shard_pairs)):
        size = min(shard_pairs, rows - first)
        directory = root / f"shard-{index:05d}"
        directory.mkdir(parents=True)
        sizes = [min(block_rows, size - at) for at in range(0, size, block_rows)]
        write_shard(directory, ((_id_lists(rng, n, longest), _id_lists(rng, n, longest)) for n in sizes))
        shards.append(directory)
    (root / "manifest").mkdir()
    write_manifest(root, shards, root / "manifest")
    return Store.open(root, root / "manifest")


def interleaved(ranks: list[list[list[int]]]) -> list[list[int]]:
    """The global sequence that processes' batches form: rank r's k-th batch is global batch kR + r."""
    assert len({len(batches) for batches in ranks}) == 1  # every process trains as many batches
    return [batch for round_ in zip(*ranks, strict=True) for batch in round_]
