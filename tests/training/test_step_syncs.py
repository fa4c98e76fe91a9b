"""A training step reads no value of a tensor it computed, so on a GPU the host never waits for the
device mid-step and keeps queueing work ahead of it. On a CPU nothing waits, so the test watches
for the calls that would: reading a tensor's value (``item``, ``int``, ``bool``) and ``nonzero``.
Values the host knew already are logged as float64 CPU tensors (``module.host_scalar``); reading
those back costs nothing anywhere."""

from __future__ import annotations

import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from seq2seq.launch.start import start_run
from seq2seq.training import run as training
from tests.helpers.compose import tiny_job

READS = {"_local_scalar_dense", "nonzero", "is_nonzero", "equal", "masked_select"}
# Where reading is fine: the collate function runs on the host, in the loader's workers on a GPU
# machine; the loss watch (FiniteLossWatch) reads a verdict at once only on a CPU.
HOST_SIDE = ("seq2seq/data/batching.py:", "seq2seq/training/module.py:_check")


class ValueReads(TorchDispatchMode):
    """Counts the ops that read tensor values, by the nearest line of seq2seq code that asked."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        host_value = bool(args) and getattr(args[0], "dtype", None) == torch.float64
        if func.__name__.split(".")[0] in READS and not host_value:
            frames = traceback.extract_stack()
            ours = [f for f in frames if "/seq2seq/" in f.filename]
            names = [f"{f.filename}:{f.name}" for f in frames]
            if not any(part in name for part in HOST_SIDE for name in names):
                where = ours[-1] if ours else frames[-2]
                self.reads[f"{func.__name__} at {where.filename}:{where.lineno}"] += 1
        return func(*args, **(kwargs or {}))


class WatchSteps(pl.Callback):
    """Watches every hook from the start of step ``first`` to the start of step ``last``, inside
    the run (a stop requested at a step makes Lightning write its scalars there)."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last = first, last
        self.mode = ValueReads()

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.first:
            self.mode.__enter__()
        elif trainer.global_step == self.last:
            self.mode.__exit__(None, None, None)


def test_training_steps_read_no_device_value(tmp_path: Path, monkeypatch) -> None:
    watch = WatchSteps(first=3, last=13)
    build_trainer = training.build_trainer

    def with_watch(*args: Any) -> pl.Trainer:
        trainer = build_trainer(*args)
        trainer.callbacks.append(watch)
        return trainer

    monkeypatch.setattr(training, "build_trainer", with_watch)
    overrides = (
        "trainer.max_epochs=1",  # 16 steps
        "trainer.log_every_n_steps=1000",  # the logger reads its scalars when it writes them
        "trainer.val_check_interval=null",
        "trainer.check_val_every_n_epoch=1000",
        "callbacks.progress_every_n_steps=0",
        "callbacks.progress_every_s=0",
        "model.dropout=0.1",
        "optim.dropout_min_epochs=1",
    )
    start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *overrides))
    assert watch.mode.reads == Counter()
