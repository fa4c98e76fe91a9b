"""The training batch sampler and the order in which it deals its batches.

:class:`TokenBudgetBatchSampler` deals token-budget batches (:func:`~seq2seq.data.batching.pack`)
to the ranks; all its randomness derives from (seed, epoch), so every rank computes the same batch
list without communicating. :class:`BatchOrder`, a Lightning callback, sets each epoch on it (or
on :class:`~seq2seq.data.streamed.batches.StreamedBatchSampler`) and, after a resume, leaves out of the
interrupted epoch the batches trained before, also with another number of processes, so that the
resumed run ends as one never interrupted would. Lightning does neither for a custom batch sampler:
it calls ``set_epoch`` only on a loader's ``sampler`` and ``batch_sampler.sampler``, and starts an
epoch resumed mid-way again at its first batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any

import numpy as np
import pytorch_lightning as pl
from torch.utils.data import Sampler

from seq2seq.config import ConfigError
from seq2seq.data.batching import Stop, pack
from seq2seq.data.streamed.batches import StreamedBatchSampler

RESUME_WARNING = "You're resuming from a checkpoint that ended before the epoch ended"


def _split_to_multiple(batches: list[np.ndarray], world_size: int) -> list[np.ndarray]:
    """Halve the largest batches until every rank can get the same number of them."""
    batches = list(batches)
    while len(batches) % world_size:
        largest = max(range(len(batches)), key=lambda i: len(batches[i]))
        if len(batches[largest]) < 2:
            raise ValueError(f"{sum(map(len, batches))} examples cannot fill {world_size} ranks")
        half = len(batches[largest]) // 2
        big = batches.pop(largest)
        batches[largest:largest] = [big[:half], big[half:]]
    return batches


def _left_after(batches: list[np.ndarray], stops: Sequence[Stop]) -> tuple[int, list[np.ndarray]]:
    """The batches per rank that runs stopped at ``stops`` had done, and the batches they left.

    A run of N ranks that did k batches each consumed exactly the first k*N batches of its list
    (rank r took r, r+N, ...); the next run re-splits the rest for its own number of ranks.
    """
    done = 0
    for world_size, stop in stops:
        batches = _split_to_multiple(batches, world_size)[(stop - done) * world_size :]
        done = stop
    return done, batches


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices whose padded size stays within ``max_tokens``.

    ``set_epoch`` picks the epoch's deterministic shuffle and ``continue_epoch`` leaves out what
    earlier runs trained of it; in training, :class:`BatchOrder` calls both.
    With ``world_size > 1`` ranks get disjoint, equally many batches.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        max_tokens: int,
        shuffle: bool,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        if self.lengths.size and self.lengths.max() > max_tokens:
            raise ValueError(f"an example of length {self.lengths.max()} exceeds max_tokens={max_tokens}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self._stops: tuple[int, tuple[Stop, ...]] = (0, ())  # (epoch, stops): they apply to that epoch only
        self._cached: tuple[tuple, tuple[int, list[np.ndarray]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def continue_epoch(self, stops: Sequence[Stop]) -> None:
        """Leave out of the current epoch what earlier runs over it trained, for every pass over it.

        ``stops`` lists each earlier run's world size and the batches per rank it had done when it
        stopped (Lightning's count, which a resumed run carries on from), oldest first. One stop of
        this sampler's own world size skips that many batches of the epoch; another world size
        re-deals the rest. Raises ValueError when the rest cannot give every rank a batch.
        """
        self._stops = (self.epoch, tuple((int(size), int(done)) for size, done in stops))
        self._plan()

    def _current_stops(self) -> tuple[Stop, ...]:
        epoch, stops = self._stops
        return stops if epoch == self.epoch else ()

    def _laid_out(self, world_size: int) -> list[np.ndarray]:
        """The current epoch's batches in the order a run of ``world_size`` ranks deals them."""
        rng = np.random.default_rng([self.seed, self.epoch])
        if self.shuffle:  # noise < 1 only reorders equal lengths
            order = np.argsort(self.lengths + rng.random(len(self.lengths)), kind="stable")
        else:
            order = np.argsort(self.lengths, kind="stable")
        batches = _split_to_multiple(pack(order, self.lengths, self.max_tokens), world_size)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def _plan(self) -> tuple[int, list[np.ndarray]]:
        """Batches done before this run, and this rank's batches of the rest; computed once per epoch."""
        stops = self._current_stops()
        key = (self.epoch, stops)
        if self._cached is None or self._cached[0] != key:
            first = stops[0][0] if stops else self.world_size
            done, rest = _left_after(self._laid_out(first), stops)
            rest = _split_to_multiple(rest, self.world_size)
            self._cached = (key, (done, rest[self.rank :: self.world_size]))
        return self._cached[1]

    def __iter__(self) -> Iterator[list[int]]:
        # A generator: the epoch is read at the first batch, not when iter() is called,
        # because Lightning may create the iterator before it calls set_epoch.
        for batch in self._plan()[1]:
            yield batch.tolist()

    def __len__(self) -> int:
        """Batches per epoch on this rank, counting those done before a resume: Lightning counts
        them as done when it resumes mid-epoch. Equal on every rank."""
        done, batches = self._plan()
        return done + len(batches)


Samplers = (TokenBudgetBatchSampler, StreamedBatchSampler)  # the training batch samplers BatchOrder orders


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
