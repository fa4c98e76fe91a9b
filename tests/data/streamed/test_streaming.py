"""``data.streaming``: the in-memory path's split, tokenizer and ids built in shards; one global batch
sequence whatever the processes and loader workers; memory that does not grow with the store."""

from __future__ import annotations

import logging
import multiprocessing
import os
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from torch.utils.data import DataLoader

from seq2seq.config import DataConfig
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.streamed import build
from seq2seq.data.streamed.batches import StreamedBatchSampler, StreamedPairs
from seq2seq.data.streamed.shards import Store
from seq2seq.inference.evaluation import eval_set
from tests.helpers.streamed_store import MAX_LENGTH, interleaved, make_store
from tests.helpers.tiny import CORPUS

MAX_TOKENS = 256
SHARDS = [(1, 1), (7, 3), (100_000, 64)]  # (pairs per shard, pairs per block)
PAIRS = 300


def sampler(
    store: Store,
    rank: int = 0,
    world_size: int = 1,
    epoch: int = 0,
    stops=(),
    max_tokens=MAX_TOKENS,
    **kwargs,
) -> StreamedBatchSampler:
    """Rank ``rank``'s sampler of ``epoch``, continuing after ``stops``."""
    kwargs = {"max_length": MAX_LENGTH, "window_blocks": 4, **kwargs}
    made = StreamedBatchSampler(store, max_tokens, 3, rank=rank, world_size=world_size, **kwargs)
    made.set_epoch(epoch)
    made.continue_epoch(stops)
    return made


def all_lengths(store: Store) -> np.ndarray:
    return np.concatenate([store.block_lengths(b) for b in range(store.blocks)])


@pytest.mark.parametrize(("shard_pairs", "block_rows"), SHARDS)
def test_every_pair_once_per_epoch_within_the_budget(
    tmp_path: Path, shard_pairs: int, block_rows: int
) -> None:
    store = make_store(tmp_path, PAIRS, shard_pairs, block_rows)
    lengths = all_lengths(store)
    for epoch in (0, 1):
        whole = sampler(store, epoch=epoch)
        batches = list(whole)
        assert len(whole) == len(batches)
        assert sorted(row for batch in batches for row in batch) == list(range(PAIRS))
        assert all(len(batch) * lengths[batch].max() <= MAX_TOKENS for batch in batches)


@pytest.mark.parametrize(("shard_pairs", "block_rows"), SHARDS)
def test_one_global_sequence_for_one_to_four_processes(
    tmp_path: Path, shard_pairs: int, block_rows: int
) -> None:
    store = make_store(tmp_path, PAIRS, shard_pairs, block_rows)
    whole = list(sampler(store, epoch=2))
    for world_size in (2, 3, 4):
        ranks = [sampler(store, rank, world_size, epoch=2) for rank in range(world_size)]
        assert [len(rank) for rank in ranks] == [len(whole) // world_size] * world_size
        merged = interleaved([list(rank) for rank in ranks])
        assert merged == whole[: len(merged)]


@pytest.mark.parametrize(("shard_pairs", "block_rows"), SHARDS)
@pytest.mark.parametrize("truncate", [False, True])
def test_batches_counted_from_histograms_are_the_windows_batches(
    tmp_path: Path, shard_pairs: int, block_rows: int, truncate: bool
) -> None:
    store = make_store(tmp_path, PAIRS, shard_pairs, block_rows, longest=60)
    for epoch in (0, 1):
        made = sampler(store, epoch=epoch, max_length=20, truncate=truncate)
        counted = made._window_counts()
        windows = made.windows()
        assert counted.tolist() == [len(made.window_batches(w, blocks)) for w, blocks in enumerate(windows)]


def test_epochs_differ_and_the_seed_decides(tmp_path: Path) -> None:
    store = make_store(tmp_path, 600, 100, 16)
    assert list(sampler(store, epoch=0)) == list(sampler(store, epoch=0))
    assert list(sampler(store, epoch=0)) != list(sampler(store, epoch=1))
    other_seed = StreamedBatchSampler(store, MAX_TOKENS, 4, MAX_LENGTH, window_blocks=4)
    assert list(other_seed) != list(sampler(store, epoch=0))


def test_long_pairs_are_dropped_or_truncated(tmp_path: Path) -> None:
    store = make_store(tmp_path, 600, 100, 16, longest=60)
    lengths = all_lengths(store)
    dropped = [row for batch in sampler(store, max_length=20) for row in batch]
    assert sorted(dropped) == np.flatnonzero(lengths <= 21).tolist()
    kept = sampler(store, max_length=20, truncate=True)
    assert sorted(row for batch in kept for row in batch) == list(range(600))
    assert all(len(batch) * np.minimum(lengths[batch], 21).max() <= MAX_TOKENS for batch in kept)


def _ids(examples: list[dict]) -> list[tuple[list[int], list[int]]]:
    return [(example["src_ids"], example["tgt_ids"]) for example in examples]


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_loader_workers_read_the_same_batches(tmp_path: Path, workers: int) -> None:
    store = make_store(tmp_path, 600, 7, 3)
    pairs = StreamedPairs(store)
    expected = [_ids([pairs[row] for row in batch]) for batch in sampler(store, 1, 2)]
    loader = DataLoader(pairs, batch_sampler=sampler(store, 1, 2), collate_fn=_ids, num_workers=workers)
    assert list(loader) == expected
    block = store.block_start.searchsorted(5, side="right") - 1
    first = pa.ipc.open_file(str(tmp_path / store.shard_names[store.block_shard[block]] / "ids.arrow"))
    row = first.get_batch(int(store.block_index[block])).column("src_ids")[5 - int(store.block_start[block])]
    assert pairs[5]["src_ids"] == row.as_py()


@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 1), (2, 3), (3, 2)])
@pytest.mark.parametrize("share", [0.0, 0.4, 0.99])
def test_resumed_at_another_world_size_goes_on_with_the_global_sequence(
    tmp_path: Path, before: int, after: int, share: float
) -> None:
    store = make_store(tmp_path, 600, 7, 3)
    whole = list(sampler(store))
    done = int(share * len(sampler(store, 0, before)))
    first = interleaved([list(sampler(store, rank, before))[:done] for rank in range(before)])
    resumed = [sampler(store, rank, after, stops=[(before, done)]) for rank in range(after)]
    assert [len(rank) for rank in resumed] == [done + (len(whole) - len(first)) // after] * after
    rest = interleaved([list(rank) for rank in resumed])
    assert first + rest == whole[: len(first) + len(rest)]
    assert len(whole) - len(first) - len(rest) < after  # at most a partial round is left out


def test_split_tokenizer_and_ids_are_the_in_memory_paths(tmp_path: Path) -> None:
    settings = {"path": str(CORPUS), "valid_size": 10, "test_size": 10, "vocab_size": 300, "num_workers": 0}
    memory = TranslationDataModule(DataConfig(**settings, cache_dir=str(tmp_path / "memory")))
    memory.setup()
    streamed = TranslationDataModule(
        DataConfig(**settings, cache_dir=str(tmp_path / "s"), streaming=True, shard_pairs=7)
    )
    streamed.setup()
    assert streamed.tokenizer.to_dict() == memory.tokenizer.to_dict()
    assert streamed.stats == memory.stats
    for name in ("valid", "test"):
        assert streamed.raw_splits[name].to_dict() == memory.raw_splits[name].to_dict()
        assert streamed.splits[name].to_dict() == memory.splits[name].to_dict()
    store = streamed.streamed.store
    kept = np.flatnonzero(all_lengths(store) <= MAX_LENGTH + 1)
    ids = memory.splits["train"].select_columns(["src_ids", "tgt_ids"]).to_list()
    in_store = [streamed.streamed[int(row)] for row in kept]
    assert sorted(map(_pair, in_store)) == sorted(map(_pair, ids))  # the same pairs, shuffled in shards
    assert [_pair(pair) for pair in in_store] != [_pair(pair) for pair in ids]


def _pair(example: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(example["src_ids"]), tuple(example["tgt_ids"])


def test_a_corpus_sorted_by_length_is_shuffled_within_each_shard(tmp_path: Path) -> None:
    sorted_corpus = tmp_path / "sorted.tsv"
    lines = sorted(set(CORPUS.read_text(encoding="utf-8").splitlines()), key=len)
    sorted_corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = {"path": str(sorted_corpus), "valid_size": 10, "test_size": 10, "vocab_size": 300}
    store = build.build(DataConfig(**settings, cache_dir=str(tmp_path / "s"), shard_pairs=100), 8).store
    again = build.build(DataConfig(**settings, cache_dir=str(tmp_path / "again"), shard_pairs=100), 8).store
    lengths = all_lengths(store)
    assert np.array_equal(lengths, all_lengths(again))  # the order is seeded
    first_shard = lengths[: store.block_start[np.searchsorted(store.block_shard, 1)]]
    assert np.corrcoef(np.arange(len(first_shard)), first_shard)[0, 1] < 0.5  # sorted: near 1


def test_evaluation_of_a_streamed_run_reads_its_held_out_text_not_an_in_memory_split(tmp_path: Path) -> None:
    settings = {"path": str(CORPUS), "valid_size": 10, "test_size": 10, "vocab_size": 300}
    memory = DataConfig(**settings, cache_dir=str(tmp_path / "memory"))
    streamed = DataConfig(**settings, cache_dir=str(tmp_path / "s"), streaming=True, shard_pairs=7)
    build.build(streamed)  # as training built it
    for split in ("valid", "test"):
        assert eval_set(split, streamed) == eval_set(split, memory)
    assert not list((tmp_path / "s").glob("split-*"))  # no index over every pair, as without streaming


def test_a_corpus_too_small_for_the_sizes_asked_is_split_as_without_streaming(tmp_path: Path) -> None:
    """The default 2,000 + 2,000 of a 252-source corpus: a tenth of its sources each, both ways."""
    memory = DataConfig(path=str(CORPUS), cache_dir=str(tmp_path / "memory"))
    streamed = DataConfig(path=str(CORPUS), cache_dir=str(tmp_path / "s"), streaming=True, shard_pairs=7)
    for split in ("valid", "test"):
        sources, _ = eval_set(split, streamed)
        assert len(sources) == 25 and eval_set(split, streamed) == eval_set(split, memory)


def test_a_store_of_one_shard_per_pair_builds_and_opens(tmp_path: Path) -> None:
    cfg = DataConfig(
        path=str(CORPUS), valid_size=10, test_size=10, vocab_size=300, cache_dir=str(tmp_path), shard_pairs=1
    )
    store = build.build(cfg, block_rows=1).store
    assert (len(store.shard_names), store.rows, store.blocks) == (store.rows, store.rows, store.rows)
    assert build.build(cfg, block_rows=1).store.root == store.root  # built once, then opened


def _peaks(store: Store, reads: int) -> tuple[int, int]:
    """Peak Python-traced bytes and Arrow pool bytes over an epoch's batches, ``reads`` of them read."""
    pairs = StreamedPairs(store)
    tracemalloc.start()
    pool_peak = 0
    epoch = sampler(store, window_blocks=16, max_tokens=4096)
    batches = len(epoch)
    every = max(1, batches // reads)
    for index, batch in enumerate(epoch):
        if index % every == 0:
            pairs.__getitems__(batch)
            pool_peak = max(pool_peak, pa.total_allocated_bytes())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, pool_peak


@pytest.mark.slow
def test_memory_does_not_grow_with_the_store(tmp_path: Path) -> None:
    small = make_store(tmp_path / "small", 200_000, 1_000_000, 4096, longest=12)
    large = make_store(tmp_path / "large", 2_000_000, 1_000_000, 4096, longest=12)
    (small_traced, small_pool), (large_traced, large_pool) = _peaks(small, 20), _peaks(large, 20)
    assert large_traced - small_traced < 2**20
    assert large_pool - small_pool < 2**20


def _build_as(rank: int, settings: dict, log_file: Path) -> list:
    """Rank ``rank`` of 3 building the store; what it reads of it."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="3")
    handler = logging.FileHandler(log_file)
    logging.getLogger("seq2seq.data").addHandler(handler)
    logging.getLogger("seq2seq.data").setLevel(logging.INFO)
    store = build.build(DataConfig(**settings), block_rows=4).store
    pairs = StreamedPairs(store)
    return [pairs[row] for row in range(store.rows)]


@pytest.mark.slow
def test_processes_share_the_shards_and_build_each_once(tmp_path: Path) -> None:
    settings = {"path": str(CORPUS), "valid_size": 10, "test_size": 10, "vocab_size": 300, "shard_pairs": 20}
    log_file = tmp_path / "data.log"
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        read = pool.starmap(
            _build_as, [(rank, {**settings, "cache_dir": str(tmp_path)}, log_file) for rank in range(3)]
        )
    assert read[0] == read[1] == read[2]
    built = [
        line.split(" into ")[1]
        for line in log_file.read_text().splitlines()
        if line.startswith("building the ")
    ]
    shards = [line for line in built if "/shard-" in line]
    assert len(built) == len(set(built)) and len(shards) == -(-len(read[0]) // 20)


def test_the_build_command_builds_and_bad_input_is_one_line(tmp_path: Path, capsys) -> None:
    assert build.main(["experiment=tiny", f"data.cache_dir={tmp_path}", "data.shard_pairs=100"]) == 0
    assert capsys.readouterr().out.startswith("store ready: 273 training pairs in 3 shards under ")
    assert build.main([f"data.cache_dir={tmp_path}", "data.path=missing.tsv"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
