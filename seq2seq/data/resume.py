"""Which training batch comes next: each epoch's shuffle and, after a resume, the batches of the
interrupted epoch that the checkpointed run had not trained on, so that a resumed run ends with the
same weights and step count as one that was never interrupted (tests/test_faults.py), and a run
resumed with another number of processes still trains each pair of that epoch exactly once
(tests/test_resume_world_size.py).

All of it is :class:`BatchOrder`; the batch sampler only offers ``set_epoch`` and ``continue_epoch``.
Lightning does neither for a custom batch sampler: it calls ``set_epoch`` only on a loader's
``sampler`` and ``batch_sampler.sampler``, and after a mid-epoch resume it would start the epoch
again at its first batch (warning that the resume is not exact).
"""

from __future__ import annotations

import warnings
from contextlib import ExitStack
from typing import Any

import pytorch_lightning as pl

from seq2seq.config import ConfigError
from seq2seq.data.batching import Stop, TokenBudgetBatchSampler
from seq2seq.data.stream import StreamedBatchSampler

RESUME_WARNING = "You're resuming from a checkpoint that ended before the epoch ended"
Samplers = (TokenBudgetBatchSampler, StreamedBatchSampler)  # the training batch samplers this orders


def stops_to_continue(saved: dict[str, Any], epoch: int, done: int, world_size: int) -> list[Stop]:
    """The runs over ``epoch`` before this one, from :meth:`BatchOrder.state_dict` of the checkpoint
    taken after ``done`` batches per rank. A checkpoint without it (an older run) was written by
    this run's ``world_size``: nothing else can be known."""
    same_epoch = saved.get("epoch") == epoch
    stops = [(int(size), int(at)) for size, at in saved.get("stops", [])] if same_epoch else []
    written_by = saved.get("world_size") or world_size
    if stops and stops[-1][0] == written_by:  # the same world size went on: one stop says it all
        stops.pop()
    return [*stops, (written_by, done)]


def too_few_left(written_by: int, world_size: int, epoch: int, err: ValueError) -> str:
    """Why an epoch cannot go on with ``world_size`` processes, and how to resume instead."""
    return (
        f"trainer.devices: the checkpoint of world size {written_by} left too little of epoch {epoch} "
        f"for world size {world_size} ({err}); resume it with world size {written_by} and "
        f"trainer.max_epochs={epoch + 1} to finish the epoch, then from its last.ckpt with {world_size}"
    )


class BatchOrder(pl.Callback):
    """Sets each epoch on the training batch sampler and continues an interrupted epoch exactly,
    with the number of processes that wrote the checkpoint or another one.

    Its checkpoint state is the world size of the run and the earlier runs over the current epoch.
    Lightning restores it (and the loops' batch counts) before it builds the training loader.
    """

    def __init__(self) -> None:
        self._quiet = ExitStack()  # the warning filter, from the start of a resumed run to its first batch
        self._world_size: int | None = None
        self._saved: dict[str, Any] = {}  # the checkpoint's state, until the training loader is built
        self._stops: tuple[int, list[Stop]] = (0, [])  # (epoch, runs over it before this one)
        self._reload_every: int | None = None  # the user's setting, while a reload is forced

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._world_size = trainer.world_size

    def state_dict(self) -> dict[str, Any]:
        epoch, stops = self._stops
        return {"world_size": self._world_size, "epoch": epoch, "stops": [list(stop) for stop in stops]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved = state_dict

    @classmethod
    def continue_interrupted_epoch(
        cls, sampler: TokenBudgetBatchSampler | StreamedBatchSampler, trainer: pl.Trainer | None
    ) -> None:
        """After a resume, leave out of the interrupted epoch what the checkpointed runs trained on.

        The datamodule calls this when it builds the training loader: Lightning creates the loader's
        iterator (and starts its workers, which read their first batches) right after, before any
        callback runs. A checkpoint taken on an epoch's last batch starts the next epoch.
        """
        if trainer is None or not trainer.fit_loop.restarting:
            return
        order = next((c for c in trainer.callbacks if isinstance(c, cls)), None) or cls()
        order._continue(sampler, trainer)

    def _continue(self, sampler: TokenBudgetBatchSampler | StreamedBatchSampler, trainer: pl.Trainer) -> None:
        epoch, done = trainer.current_epoch, trainer.fit_loop.epoch_loop.batch_progress.current.processed
        stops = stops_to_continue(self._saved, epoch, done, sampler.world_size)
        sampler.set_epoch(epoch)
        try:
            sampler.continue_epoch(stops)
        except ValueError as err:
            raise ConfigError(too_few_left(stops[-1][0], sampler.world_size, epoch, err)) from err
        if len(sampler) == done:  # nothing left of the epoch
            epoch, stops = epoch + 1, []
            sampler.set_epoch(epoch)
        self._stops = (epoch, stops)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Lightning warns that a mid-epoch resume is not exact when the epoch restarts; it is exact."""
        if trainer.fit_loop.restarting:
            self._quiet.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", message=RESUME_WARNING)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Before the epoch's iterator is created (not called for an epoch continued after a resume)."""
        sampler = getattr(trainer.train_dataloader, "batch_sampler", None)
        if isinstance(sampler, Samplers):
            sampler.set_epoch(trainer.current_epoch)
        self._stops = (trainer.current_epoch, [])
        if self._reload_every is not None:  # the loader of this epoch is the reloaded one
            trainer.reload_dataloaders_every_n_epochs, self._reload_every = self._reload_every, None

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """An epoch continued with another world size had its own length, as has every streamed
        epoch, and Lightning reads a loader's length only when it builds it: the next epoch gets a
        new loader."""
        epoch, stops = self._stops
        streamed = isinstance(getattr(trainer.train_dataloader, "batch_sampler", None), StreamedBatchSampler)
        resized = epoch == trainer.current_epoch and any(size != trainer.world_size for size, _ in stops)
        if streamed or resized:
            self._reload_every = trainer.reload_dataloaders_every_n_epochs
            trainer.reload_dataloaders_every_n_epochs = 1

    def on_train_batch_start(self, *args: Any) -> None:
        self._quiet.close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, error: BaseException) -> None:
        self._quiet.close()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._quiet.close()
