"""A checkpoint written by N processes resumed by M: the interrupted epoch trains each pair once."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seq2seq.config import ConfigError, DataConfig, validated
from seq2seq.data.batching import Stop
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.sampler import BatchOrder, TokenBudgetBatchSampler, stops_to_continue
from tests.helpers.compose import STOP_AT, run_training, tiny_run

MAX_TOKENS = 256
EPOCH = 3


@pytest.fixture
def lengths() -> np.ndarray:
    return np.random.default_rng(0).integers(2, 60, size=2000)


def samplers(
    lengths: np.ndarray,
    world_size: int,
    stops: list[Stop],
    max_tokens: int = MAX_TOKENS,
    seed: int = 7,
    epoch: int = EPOCH,
) -> list[TokenBudgetBatchSampler]:
    """Every rank's sampler of a run over ``epoch`` that continues after ``stops``."""
    ranks = [
        TokenBudgetBatchSampler(lengths, max_tokens, True, seed, r, world_size) for r in range(world_size)
    ]
    for sampler in ranks:
        sampler.set_epoch(epoch)
        sampler.continue_epoch(stops)
    return ranks


def trained(ranks: list[TokenBudgetBatchSampler], batches: int | None = None) -> list[int]:
    """The indices the ranks train on, all of their batches or the first ``batches`` of each."""
    return [i for sampler in ranks for batch in list(sampler)[:batches] for i in batch]


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2), (2, 3), (3, 2)])
@pytest.mark.parametrize("share", [0.0, 0.4, 0.99])
def test_each_pair_once_across_world_sizes(
    lengths: np.ndarray, before: int, after: int, share: float
) -> None:
    first = samplers(lengths, before, [])
    done = int(share * len(first[0]))
    resumed = samplers(lengths, after, [(before, done)])
    assert len({len(sampler) for sampler in resumed}) == 1  # every rank ends the epoch together
    assert all(len(sampler) == done + len(list(sampler)) for sampler in resumed)  # Lightning's count
    assert sorted(trained(first, done) + trained(resumed)) == list(range(len(lengths)))
    assert all(len(b) * lengths[b].max() <= MAX_TOKENS for sampler in resumed for b in sampler)


def test_each_pair_once_after_two_resumes(lengths: np.ndarray) -> None:
    """2 processes, then 3 from the 2's checkpoint, then 1 from the 3's: its stops name both."""
    first = samplers(lengths, 2, [])
    second = samplers(lengths, 3, [(2, 5)])
    third = samplers(lengths, 1, [(2, 5), (3, 9)])
    assert sorted(trained(first, 5) + trained(second, 9 - 5) + trained(third)) == list(range(len(lengths)))


def test_same_world_size_deals_as_an_uninterrupted_run(lengths: np.ndarray) -> None:
    full = [list(sampler) for sampler in samplers(lengths, 2, [])]
    resumed = samplers(lengths, 2, [(2, 4)])
    assert [list(sampler) for sampler in resumed] == [batches[4:] for batches in full]
    assert [len(sampler) for sampler in resumed] == [len(batches) for batches in full]


def test_too_little_left_for_every_rank_is_an_error() -> None:
    sampler = TokenBudgetBatchSampler(np.full(3, 10), 10, False, 0, rank=0, world_size=2)
    with pytest.raises(ValueError, match="1 examples cannot fill 2 ranks"):
        sampler.continue_epoch([(1, 2)])  # one single-pair batch left for two processes


def test_stops_from_the_checkpoint_state() -> None:
    assert stops_to_continue({}, 0, 7, world_size=2) == [(2, 7)]  # an older checkpoint: same size
    saved = {"world_size": 3, "epoch": 4, "stops": [[2, 5]]}
    assert stops_to_continue(saved, 4, 9, world_size=1) == [(2, 5), (3, 9)]
    assert stops_to_continue(saved, 5, 2, world_size=1) == [(3, 2)]  # earlier epochs do not count
    again = {"world_size": 3, "epoch": 4, "stops": [[2, 5], [3, 9]]}
    assert stops_to_continue(again, 4, 12, world_size=3) == [(2, 5), (3, 12)]


def resumed_trainer(order: BatchOrder, epoch: int, done: int) -> SimpleNamespace:
    """What BatchOrder reads of a Lightning Trainer restored from a checkpoint after ``done`` batches."""
    progress = SimpleNamespace(current=SimpleNamespace(processed=done))
    fit_loop = SimpleNamespace(restarting=True, epoch_loop=SimpleNamespace(batch_progress=progress))
    return SimpleNamespace(fit_loop=fit_loop, current_epoch=epoch, callbacks=[order])


def test_too_little_left_stops_with_both_world_sizes_and_the_way_out() -> None:
    order = BatchOrder()
    order.load_state_dict({"world_size": 1, "epoch": 0, "stops": []})
    sampler = TokenBudgetBatchSampler(np.full(3, 10), 10, False, 0, rank=1, world_size=2)
    with pytest.raises(ConfigError) as error:
        BatchOrder.continue_interrupted_epoch(sampler, resumed_trainer(order, epoch=0, done=2))
    assert str(error.value) == (
        "trainer.devices: the checkpoint of world size 1 left too little of epoch 0 for world size 2 "
        "(1 examples cannot fill 2 ranks); resume it with world size 1 and trainer.max_epochs=1 "
        "to finish the epoch, then from its last.ckpt with 2"
    )


def test_a_checkpoint_at_the_end_of_an_epoch_starts_the_next(lengths: np.ndarray) -> None:
    order = BatchOrder()
    order.load_state_dict({"world_size": 2, "epoch": EPOCH, "stops": []})
    sampler = TokenBudgetBatchSampler(lengths, MAX_TOKENS, True, 7, rank=0, world_size=3)
    whole = len(samplers(lengths, 2, [])[0])
    BatchOrder.continue_interrupted_epoch(sampler, resumed_trainer(order, EPOCH, done=whole))
    fresh = TokenBudgetBatchSampler(lengths, MAX_TOKENS, True, 7, rank=0, world_size=3)
    fresh.set_epoch(EPOCH + 1)
    assert (len(sampler), list(sampler)) == (len(fresh), list(fresh))
    assert (order.state_dict()["epoch"], order.state_dict()["stops"]) == (EPOCH + 1, [])


# End to end: train.py with 2 CPU processes (gloo), and in-process with 1.


def train_sampler(tmp_path: Path) -> TokenBudgetBatchSampler:
    """The training sampler of a one-process run: the pairs' lengths, the budget and the seed."""
    cfg = tiny_run(tmp_path / "run", tmp_path / "cache")
    datamodule = TranslationDataModule(validated(DataConfig, cfg.data, "data"), seed=cfg.seed)
    datamodule.setup("fit")
    return datamodule.train_dataloader().batch_sampler


@pytest.mark.slow
@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)])
def test_resumed_with_another_world_size_trains_each_pair_of_the_epoch_once(tmp_path, before, after):
    stop = (f"trainer.max_steps={STOP_AT}", f"callbacks.checkpoint_every_n_steps={STOP_AT}")
    run_training(tmp_path, before, *stop)
    middle = tmp_path / "middle.ckpt"
    shutil.copy(tmp_path / "run" / "checkpoints" / "last.ckpt", middle)
    resume = tmp_path / "run" / "checkpoints" / "last.ckpt"  # the run's own: it continues in its directory
    run_training(tmp_path, after, f"ckpt_path={resume}", "trainer.max_epochs=2")

    checkpoint = torch.load(middle, weights_only=True)
    done = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"]
    saved = checkpoint["callbacks"][BatchOrder.__qualname__]
    assert (done, saved["world_size"]) == (STOP_AT, before)
    one = train_sampler(tmp_path)
    run = {"max_tokens": one.max_tokens, "seed": one.seed, "epoch": 0}
    first = samplers(one.lengths, before, [], **run)
    resumed = samplers(one.lengths, after, stops_to_continue(saved, 0, done, after), **run)
    assert sorted(trained(first, done) + trained(resumed)) == list(range(len(one.lengths)))
    final = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    next_epoch = len(samplers(one.lengths, after, [], **run)[0])
    assert final["global_step"] == len(resumed[0]) + next_epoch  # the rest of epoch 0, then all of epoch 1
    assert final["callbacks"][BatchOrder.__qualname__] == {"world_size": after, "epoch": 1, "stops": []}
