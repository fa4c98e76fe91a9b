"""Token-budget sampler invariants and the collate's special-token layout."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch

from seq2seq.data.batching import collate, pack, pack_count, pair_lengths
from seq2seq.data.sampler import TokenBudgetBatchSampler
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID

MAX_TOKENS = 256


@pytest.fixture
def lengths() -> np.ndarray:
    return np.random.default_rng(0).integers(2, 60, size=2000)


def _epoch(sampler: TokenBudgetBatchSampler, epoch: int) -> list[list[int]]:
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("shuffle", [True, False])
def test_budget_respected_and_every_index_once(lengths: np.ndarray, shuffle: bool) -> None:
    sampler = TokenBudgetBatchSampler(lengths, MAX_TOKENS, shuffle=shuffle, seed=1)
    batches = _epoch(sampler, 0)
    assert len(batches) == len(sampler)
    assert all(len(b) * lengths[b].max() <= MAX_TOKENS for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))


def test_batches_are_tight(lengths: np.ndarray) -> None:
    batches = _epoch(TokenBudgetBatchSampler(lengths, MAX_TOKENS, shuffle=True, seed=1), 0)
    padded = sum(len(b) * lengths[b].max() for b in batches)
    assert lengths.sum() / padded > 0.9


def test_epochs_differ_and_seed_is_deterministic(lengths: np.ndarray) -> None:
    a = TokenBudgetBatchSampler(lengths, MAX_TOKENS, shuffle=True, seed=1)
    b = TokenBudgetBatchSampler(lengths, MAX_TOKENS, shuffle=True, seed=1)
    other_seed = TokenBudgetBatchSampler(lengths, MAX_TOKENS, shuffle=True, seed=2)
    assert _epoch(a, 0) == _epoch(b, 0)
    assert _epoch(a, 1) == _epoch(b, 1)
    assert _epoch(a, 0) != _epoch(a, 1)
    assert _epoch(a, 0) != _epoch(other_seed, 0)


def test_unshuffled_is_sorted_and_stable(lengths: np.ndarray) -> None:
    sampler = TokenBudgetBatchSampler(lengths, MAX_TOKENS, shuffle=False, seed=1)
    flat = [i for b in _epoch(sampler, 0) for i in b]
    assert np.all(np.diff(lengths[flat]) >= 0)
    assert _epoch(sampler, 3) == _epoch(sampler, 0)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_shards_are_disjoint_equal_and_complete(lengths: np.ndarray, world_size: int) -> None:
    shards = [
        _epoch(TokenBudgetBatchSampler(lengths, MAX_TOKENS, True, seed=5, rank=r, world_size=world_size), 2)
        for r in range(world_size)
    ]
    assert len({len(shard) for shard in shards}) == 1
    flat = [i for shard in shards for batch in shard for i in batch]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(len(b) * lengths[b].max() <= MAX_TOKENS for shard in shards for b in shard)


def test_splitting_makes_batch_count_divisible() -> None:
    lengths = np.full(9, 10)  # one batch of 9 under a budget of 100
    shards = [list(TokenBudgetBatchSampler(lengths, 100, False, 0, rank=r, world_size=4)) for r in range(4)]
    assert [len(s) for s in shards] == [1, 1, 1, 1]
    assert sorted(i for s in shards for b in s for i in b) == list(range(9))


def test_continuing_with_the_same_world_size_skips_the_done_batches(lengths: np.ndarray) -> None:
    sampler = TokenBudgetBatchSampler(lengths, MAX_TOKENS, shuffle=True, seed=1)
    full = _epoch(sampler, 4)
    sampler.continue_epoch([(1, 3)])
    assert len(sampler) == len(full)  # the epoch's length is unchanged; Lightning counts skipped as done
    assert list(sampler) == full[3:]
    next_epoch = _epoch(sampler, 5)  # another epoch is not continued
    assert len(next_epoch) == len(full)
    assert sorted(i for b in next_epoch for i in b) == list(range(len(lengths)))


def test_epoch_is_read_at_the_first_batch_not_at_iter(lengths: np.ndarray) -> None:
    sampler = TokenBudgetBatchSampler(lengths, MAX_TOKENS, shuffle=True, seed=1)
    expected = _epoch(sampler, 7)
    sampler.set_epoch(0)
    iterator = iter(sampler)  # Lightning may create the iterator before calling set_epoch
    sampler.set_epoch(7)
    assert list(iterator) == expected


def test_packing_fills_each_batch_as_far_as_the_budget_allows() -> None:
    lengths = np.random.default_rng(3).integers(1, 90, size=500)  # some longer than the budget of 64
    order = np.argsort(lengths, kind="stable")
    batches = pack(order, lengths, 64)
    assert np.array_equal(np.concatenate(batches), order)  # in order, each index once
    assert all(len(batch) == 1 or len(batch) * lengths[batch].max() <= 64 for batch in batches)
    for batch, following in pairwise(batches):
        assert (len(batch) + 1) * lengths[following[0]] > 64  # the next one did not fit


@pytest.mark.parametrize("seed", range(6))
def test_counting_from_a_histogram_gives_packings_batch_count(seed: int) -> None:
    rng = np.random.default_rng(seed)
    few_lengths = rng.choice(rng.integers(1, 90, size=3), size=500)  # long runs of one length
    for lengths in (rng.integers(1, 90, size=500), few_lengths, np.array([700, 3, 3, 800])):
        for max_tokens in (1, 64, 250, 4096):
            batches = pack(np.argsort(lengths, kind="stable"), lengths, max_tokens)
            assert pack_count(np.bincount(lengths), max_tokens) == len(batches)


def test_too_long_example_is_rejected() -> None:
    with pytest.raises(ValueError, match="exceeds max_tokens"):
        TokenBudgetBatchSampler(np.array([3, 300]), MAX_TOKENS, shuffle=False, seed=0)


def test_collate_places_specials_and_padding() -> None:
    batch = collate([{"src_ids": [5, 6, 7], "tgt_ids": [8]}, {"src_ids": [9], "tgt_ids": [10, 11, 12]}])
    assert torch.equal(batch.src, torch.tensor([[5, 6, 7, EOS_ID], [9, EOS_ID, PAD_ID, PAD_ID]]))
    assert torch.equal(batch.tgt_in, torch.tensor([[BOS_ID, 8, PAD_ID, PAD_ID], [BOS_ID, 10, 11, 12]]))
    assert torch.equal(batch.tgt_out, torch.tensor([[8, EOS_ID, PAD_ID, PAD_ID], [10, 11, 12, EOS_ID]]))
    assert batch.src.dtype == batch.tgt_in.dtype == torch.long


def test_pair_length_matches_collated_width() -> None:
    examples = [{"src_ids": [5] * 4, "tgt_ids": [6] * 7}, {"src_ids": [5] * 9, "tgt_ids": [6] * 2}]
    batch = collate(examples)
    lengths = pair_lengths(np.array([4, 9]), np.array([7, 2]))
    assert max(batch.src.shape[1], batch.tgt_in.shape[1]) == lengths.max() == 10
