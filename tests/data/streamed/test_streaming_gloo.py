"""``data.streaming`` on two real processes: each reads its share of the global batch sequence
through a loader worker, and at each epoch's end they all-gather their batch counts over gloo,
which must be equal (a DDP process with a batch more would wait for the other's gradients for
ever). Shards of one pair, of seven and of 100k pairs, over two epochs."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from seq2seq.data.streamed.batches import StreamedBatchSampler, StreamedPairs
from seq2seq.data.streamed.shards import Store
from tests.helpers.streamed_store import MAX_LENGTH, interleaved, make_store

WORLD_SIZE, EPOCHS = 2, (0, 1)
STORES = [  # (pairs, pairs per shard, pairs per block, token budget)
    (300, 1, 1, 256),
    (600, 7, 3, 256),
    (100_000, 100_000, 64, 8192),
]


def digest(examples: list[dict]) -> str:
    """One batch's ids, as a short fingerprint (what crosses between processes)."""
    ids = hashlib.sha1()
    for example in examples:
        ids.update(repr((example["src_ids"], example["tgt_ids"])).encode())
    return ids.hexdigest()[:16]


def epoch_sampler(
    store: Store, max_tokens: int, rank: int, world_size: int, epoch: int
) -> StreamedBatchSampler:
    made = StreamedBatchSampler(
        store, max_tokens, 3, MAX_LENGTH, rank=rank, world_size=world_size, window_blocks=4
    )
    made.set_epoch(epoch)
    return made


def train_as(rank: int, rendezvous: str, stores: list[tuple[str, int]], out: Path) -> None:
    """Process ``rank``'s batches of each store and epoch, written to ``out`` as JSON (a pool's
    daemonic process could not start the loader's worker)."""
    multiprocessing.set_start_method("fork", force=True)  # a spawned child inherits spawn; torchrun's fork
    dist.init_process_group(
        "gloo", init_method=rendezvous, rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=60)
    )
    try:
        read = []
        for root, max_tokens in stores:
            store = Store.open(Path(root), Path(root) / "manifest")
            epochs = []
            for epoch in EPOCHS:
                sampler = epoch_sampler(store, max_tokens, rank, WORLD_SIZE, epoch)
                loader = DataLoader(
                    StreamedPairs(store), batch_sampler=sampler, collate_fn=digest, num_workers=1
                )
                batches = list(loader)
                counts = [torch.zeros(1, dtype=torch.long) for _ in range(WORLD_SIZE)]
                dist.all_gather(counts, torch.tensor([len(batches)]))
                assert len({int(count) for count in counts}) == 1, counts
                epochs.append(batches)
            read.append(epochs)
        out.write_text(json.dumps(read))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_processes_end_every_epoch_together_on_the_global_sequence(tmp_path: Path) -> None:
    stores = []
    for pairs, shard_pairs, block_rows, max_tokens in STORES:
        root = tmp_path / f"store-{shard_pairs}"
        make_store(root, pairs, shard_pairs, block_rows)
        stores.append((str(root), max_tokens))
    rendezvous = f"file://{tmp_path / 'rendezvous'}"
    spawn = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"rank-{rank}.json" for rank in range(WORLD_SIZE)]
    processes = [
        spawn.Process(target=train_as, args=(rank, rendezvous, stores, outs[rank])) for rank in range(2)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    assert [process.exitcode for process in processes] == [0] * WORLD_SIZE
    ranks = [json.loads(out.read_text()) for out in outs]
    for index, (root, max_tokens) in enumerate(stores):
        store = Store.open(Path(root), Path(root) / "manifest")
        pairs = StreamedPairs(store)
        for epoch in EPOCHS:
            one_process = epoch_sampler(store, max_tokens, 0, 1, epoch)
            whole = [digest([pairs[row] for row in batch]) for batch in one_process]
            merged = interleaved([ranks[rank][index][epoch] for rank in range(WORLD_SIZE)])
            assert merged == whole[: len(merged)]
            assert len(whole) - len(merged) < WORLD_SIZE  # at most a partial round left out
