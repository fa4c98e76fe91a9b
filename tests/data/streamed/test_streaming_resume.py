"""``data.streaming``: a run stopped on N processes resumed on M goes on with the global batch
sequence, across the end of the epoch (train.py with 2 CPU processes, gloo, and in-process with 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from seq2seq.config import DataConfig, validated
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.sampler import BatchOrder
from seq2seq.data.streamed.batches import StreamedBatchSampler
from tests.helpers.compose import STOP_AT, run_training, tiny_run

STREAMING = ("data.streaming=true", "data.shard_pairs=50")


def train_sampler(tmp_path: Path, world_size: int, epoch: int) -> StreamedBatchSampler:
    """Rank 0's training sampler of ``epoch`` in a run of ``world_size`` processes over the run's store."""
    cfg = tiny_run(tmp_path / "run", tmp_path / "cache", *STREAMING)
    datamodule = TranslationDataModule(validated(DataConfig, cfg.data, "data"), seed=cfg.seed)
    datamodule.setup("fit")
    one = datamodule.train_dataloader().batch_sampler
    sampler = StreamedBatchSampler(
        one.store, one.max_tokens, one.seed, one.max_length, one.truncate, 0, world_size, one.window_blocks
    )
    sampler.set_epoch(epoch)
    return sampler


@pytest.mark.slow
@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)])
def test_resumed_with_another_world_size_goes_on_with_the_global_sequence(tmp_path, before, after):
    stop = (f"trainer.max_steps={STOP_AT}", f"callbacks.checkpoint_every_n_steps={STOP_AT}")
    run_training(tmp_path, before, *STREAMING, *stop)
    middle = tmp_path / "middle.ckpt"
    shutil.copy(tmp_path / "run" / "checkpoints" / "last.ckpt", middle)
    resume = tmp_path / "run" / "checkpoints" / "last.ckpt"
    run_training(tmp_path, after, *STREAMING, f"ckpt_path={resume}", "trainer.max_epochs=2")

    checkpoint = torch.load(middle, weights_only=True)
    done = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"]
    assert (done, checkpoint["callbacks"][BatchOrder.__qualname__]["world_size"]) == (STOP_AT, before)
    first = train_sampler(tmp_path, 1, epoch=0)  # the global sequence: one process takes all of it
    left = len(first) - STOP_AT * before  # global batches of epoch 0 after the checkpoint
    next_epoch = len(train_sampler(tmp_path, after, epoch=1))
    final = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == STOP_AT + left // after + next_epoch  # rest of epoch 0, then epoch 1
    assert final["callbacks"][BatchOrder.__qualname__] == {"world_size": after, "epoch": 1, "stops": []}
