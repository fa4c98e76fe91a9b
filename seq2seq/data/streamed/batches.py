"""Token-budget batches streamed from a sharded store (:mod:`seq2seq.data.streamed.shards`).

Each epoch permutes the store's blocks by (seed, epoch); consecutive blocks form windows, whose
pairs are sorted by length with noise, packed to the token budget by
:func:`seq2seq.data.batching.pack`, and shuffled. That gives one global batch sequence, whatever
the number of processes or loader workers: process ``r`` of ``R`` takes batches ``r, r + R, ...``
while a whole round of ``R`` is left, so every process trains as many batches. A run that stopped
part-way into an epoch is at one global batch counter, and a run of any size goes on from it.
Nothing is kept per pair: a window's lengths and ids are read when it is reached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from torch.utils.data import Dataset, Sampler

from seq2seq.data.batching import Stop, pack, pack_count, too_long
from seq2seq.data.static_shapes import StaticShapes
from seq2seq.data.streamed.shards import BlockReader, Store

WINDOW_BLOCKS = 16  # blocks sorted together: the larger, the less padding and the longer a window's read


def global_position(stops: Sequence[Stop]) -> int:
    """Global batches of the epoch that runs stopped at ``stops`` (oldest first) had trained."""
    position, previous = 0, 0
    for world_size, done in stops:
        position += (done - previous) * world_size
        previous = done
    return position


class StreamedBatchSampler(Sampler[list[int]]):
    """Yields lists of store rows whose padded size stays within ``max_tokens``; this process's share
    of the epoch's global batch sequence. ``set_epoch`` and ``continue_epoch`` behave as those of
    :class:`~seq2seq.data.sampler.TokenBudgetBatchSampler`; :class:`~seq2seq.data.sampler.BatchOrder`
    calls them.

    Pairs over ``max_length`` are left out, or, with ``truncate``, batched at the truncated length.
    With ``shapes``, batches are packed on their pairs' rungs (:mod:`seq2seq.data.static_shapes`).
    """

    def __init__(
        self,
        store: Store,
        max_tokens: int,
        seed: int,
        max_length: int,
        truncate: bool = False,
        rank: int = 0,
        world_size: int = 1,
        window_blocks: int = WINDOW_BLOCKS,
        shapes: StaticShapes | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        self.store, self.max_tokens, self.seed = store, max_tokens, seed
        self.max_length, self.truncate = max_length, truncate
        self.rank, self.world_size, self.window_blocks = rank, world_size, window_blocks
        self.shapes = shapes
        self.epoch = 0
        self._stops: tuple[int, tuple[Stop, ...]] = (0, ())  # (epoch, stops): they apply to that epoch only
        self._counts: tuple[int, np.ndarray] | None = None  # (epoch, global batches of each window)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def continue_epoch(self, stops: Sequence[Stop]) -> None:
        """Go on from where runs that stopped at ``stops`` (world size, batches per process) left off."""
        self._stops = (self.epoch, tuple((int(size), int(done)) for size, done in stops))

    def _current_stops(self) -> tuple[Stop, ...]:
        epoch, stops = self._stops
        return stops if epoch == self.epoch else ()

    def windows(self) -> list[np.ndarray]:
        """The blocks of each window of the current epoch."""
        blocks = np.random.default_rng([self.seed, self.epoch]).permutation(self.store.blocks)
        return [blocks[i : i + self.window_blocks] for i in range(0, len(blocks), self.window_blocks)]

    def window_batches(self, window: int, blocks: np.ndarray) -> list[np.ndarray]:
        """The global batches of one window: store rows, in the order they are trained."""
        rows = np.concatenate([np.arange(*self.store.block_start[[b, b + 1]]) for b in blocks])
        lengths = np.concatenate([self.store.block_lengths(int(b)) for b in blocks])
        if self.truncate:
            lengths = np.minimum(lengths, self.max_length + 1)
        else:
            kept = ~too_long(lengths, self.max_length)
            rows, lengths = rows[kept], lengths[kept]
        if self.shapes is not None:
            lengths = self.shapes.rounded(lengths)
        rng = np.random.default_rng([self.seed, self.epoch, window])
        shuffled = rng.permutation(len(lengths))  # then a stable sort by length: ties in random order
        order = shuffled[np.argsort(lengths[shuffled].astype(np.uint16), kind="stable")]  # a radix sort
        batches = pack(order, lengths, self.max_tokens)
        return [rows[batches[i]] for i in rng.permutation(len(batches))]

    def _window_counts(self) -> np.ndarray:
        """Global batches in each window of the current epoch, counted from the blocks' length
        histograms (:func:`~seq2seq.data.batching.pack_count`), so no window is read to count them."""
        if self._counts is None or self._counts[0] != self.epoch:
            too_long = self.max_length + 2  # the first padded length that :func:`too_long` rejects
            per_block = self.store.block_histograms(too_long)
            kept = per_block[:, :too_long].copy()
            if self.truncate:
                kept[:, -1] += per_block[:, too_long]  # cut to max_length + 1
            if self.shapes is not None:
                kept = self.shapes.rebinned(kept)
            counts = [pack_count(kept[blocks].sum(axis=0), self.max_tokens) for blocks in self.windows()]
            self._counts = (self.epoch, np.asarray(counts, dtype=np.int64))
        return self._counts[1]

    def _share(self) -> tuple[int, int, int]:
        """Batches per process done before this run, the global batch this run starts at, and the
        batches this process trains."""
        stops = self._current_stops()
        start = global_position(stops)
        left = max(0, int(self._window_counts().sum()) - start)
        return (stops[-1][1] if stops else 0), start, left // self.world_size

    def __iter__(self) -> Iterator[list[int]]:
        _, start, count = self._share()
        end = start + count * self.world_size  # the global batches this run trains: [start, end)
        first = 0  # global number of the window's first batch
        for window, (blocks, size) in enumerate(zip(self.windows(), self._window_counts(), strict=True)):
            if first >= end:
                return
            low = max(first, start)
            mine = np.arange(
                low + (start + self.rank - low) % self.world_size, min(first + size, end), self.world_size
            )
            if len(mine):
                batches = self.window_batches(window, blocks)
                yield from (batches[i].tolist() for i in mine - first)
            first += size

    def __len__(self) -> int:
        """Batches of the epoch on this process, counting those done before a resume, as Lightning does."""
        done, _, count = self._share()
        return done + count


class StreamedPairs(Dataset):
    """The id lists of store rows, read a block at a time; the last ``cached_blocks`` blocks are kept."""

    def __init__(self, store: Store, cached_blocks: int = WINDOW_BLOCKS) -> None:
        self.store = store
        self.reader = BlockReader(store)
        self.cached_blocks = cached_blocks
        self._cache: OrderedDict[int, tuple[np.ndarray, ...]] = OrderedDict()

    def __len__(self) -> int:
        return self.store.rows

    def __getstate__(self) -> dict:
        return {**self.__dict__, "reader": BlockReader(self.store), "_cache": OrderedDict()}

    def _block(self, block: int) -> tuple[np.ndarray, ...]:
        """Values and offsets of both sides of ``block``, copied out of Arrow's buffers."""
        if block in self._cache:
            self._cache.move_to_end(block)
            return self._cache[block]
        batch = self.reader.read(block)
        columns = []
        for name in ("src_ids", "tgt_ids"):
            ids: pa.ListArray = batch.column(name)
            columns += [ids.values.to_numpy(), ids.offsets.to_numpy()]
        self._cache[block] = tuple(columns)
        if len(self._cache) > self.cached_blocks:
            self._cache.popitem(last=False)
        return self._cache[block]

    def __getitems__(self, rows: list[int]) -> list[dict[str, list[int]]]:
        starts = self.store.block_start
        blocks = np.searchsorted(starts, rows, side="right") - 1
        examples = []
        for row, block in zip(rows, blocks.tolist(), strict=True):
            src, src_offsets, tgt, tgt_offsets = self._block(block)
            i = row - int(starts[block])
            examples.append(
                {
                    "src_ids": src[src_offsets[i] : src_offsets[i + 1]].tolist(),
                    "tgt_ids": tgt[tgt_offsets[i] : tgt_offsets[i + 1]].tolist(),
                }
            )
        return examples

    def __getitem__(self, row: int) -> dict[str, list[int]]:
        return self.__getitems__([row])[0]
