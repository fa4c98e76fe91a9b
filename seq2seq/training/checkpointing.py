"""What makes a run resumable and safe to interrupt: every checkpoint written atomically, ``last.ckpt``
kept current, Ctrl-C between batches. The run's other callbacks live beside what they serve (the
batch order in ``data/sampler.py``, the budget in ``budget.py``, the panels in ``monitoring.py``...);
``run.build_trainer`` lists them all."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytorch_lightning as pl
from lightning_fabric.plugins import TorchCheckpointIO
from pytorch_lightning.utilities.exceptions import SIGTERMException

from seq2seq.formats.checkpoint import save_atomically

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning writes every checkpoint through :func:`~seq2seq.formats.checkpoint.save_atomically`:
    a kill never leaves half a file, and a failed write keeps the previous checkpoint."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        save_atomically(checkpoint, path)


class SaveLast(pl.Callback):
    """Keep ``last.ckpt`` current: every n steps, after each validation, at the end, on Ctrl-C and SIGTERM.

    Lightning's ModelCheckpoint refreshes ``last`` only when it also saves a monitored checkpoint,
    and its step and epoch triggers exclude each other; resuming needs all of them.
    """

    def __init__(self, dirpath: str | Path, every_n_steps: int = 0) -> None:
        self.path = Path(dirpath) / "last.ckpt"
        self.every_n_steps = every_n_steps
        self._saved_step = -1

    def _save(self, trainer: pl.Trainer) -> None:
        if trainer.global_step != self._saved_step and not trainer.sanity_checking:
            trainer.save_checkpoint(self.path, weights_only=False)
            self._saved_step = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0:
            self._save(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save(trainer)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, error: BaseException) -> None:
        if isinstance(error, (KeyboardInterrupt, SIGTERMException)):  # stopped on purpose, to be resumed
            self._save(trainer)
            why = "SIGTERM" if isinstance(error, SIGTERMException) else "interrupted"
            log.warning("%s: saved a resumable checkpoint to %s", why, self.path)


class InterruptBetweenBatches(pl.Callback):
    """Ctrl-C stops training at the next batch boundary; a second Ctrl-C stops it at once.

    Python raises KeyboardInterrupt wherever the main thread happens to be. When that is a weakref
    callback or a ``__del__``, Python prints the exception and carries on, so the Ctrl-C is lost
    and training continues (seen in tests/commands/test_faults.py). Here the signal only sets a flag, and
    the interrupt is raised between batches, where Lightning's handling calls :class:`SaveLast`
    and exits. Single-process runs only: DDP ranks must not stop at different batches.
    """

    def __init__(self) -> None:
        self._requested = False
        self._previous: Any = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.world_size == 1 and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._request)

    def _request(self, signum: int, frame: FrameType | None) -> None:
        self._requested = True
        self._restore()  # a second Ctrl-C raises at once, e.g. during a long validation
        log.warning("Ctrl-C: stopping after this batch (press it again to stop at once)")

    def _restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if self._requested:
            raise KeyboardInterrupt

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, error: BaseException) -> None:
        self._restore()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore()
