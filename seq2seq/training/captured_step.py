"""``compile=true`` with ``data.static_shapes=true``: the training step's forward and loss compiled as
one graph per batch shape, replayed as CUDA graphs on a GPU (``mode="reduce-overhead"``) and
compiled the same way, without them, on a CPU. Backward follows the graph; the optimizer is eager.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
from torch import Tensor

from seq2seq.data.batching import Batch
from seq2seq.model import Transformer
from seq2seq.training.loss import LossSums, fixed_sequence_loss

log = logging.getLogger(__name__)

BACKEND = "inductor"  # torch.compile's; tests use "aot_eager", which builds no kernels


class CapturedStep:
    """The loss sums of a training batch through ``model``, compiled at the batch's fixed shape.

    ``shapes``: how many batch shapes the run has (the ladder's rungs), each compiled once, so
    dynamo's limit on recompiles of one function is raised by it for the process: every instance
    compiles the same method, whose earlier instances' graphs count too (patching the limit around
    each call would cost the host more than a GPU step's launches). The loss is over fixed
    positions and the token count is the batch's own: nothing in the graph depends on the ids' values.
    ``backend``: torch.compile's, :data:`BACKEND` unless given; ``"cudagraphs"`` records CUDA graphs
    of the traced step without generating kernels (``python -m bench.train.step --capture`` times both).
    """

    def __init__(self, model: Transformer, smoothing: float, shapes: int, backend: str | None = None) -> None:
        self.model, self.smoothing = model, smoothing
        self.backend = BACKEND if backend is None else backend
        torch._dynamo.config.recompile_limit += shapes
        self.compiled: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]] | None = None
        self.seen: set[torch.Size] = set()
        self.first_step: tuple[torch.Size, float] | None = None  # a new shape's step: (shape, start)

    def sums(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """What is compiled: the forward and the loss, NLL and hits summed over fixed positions."""
        memory, src_mask = self.model.encode(src)
        states = self.model.decode_states(tgt_in, memory, src_mask)  # (B, T, D)
        weight, pad_id = self.model.generator.weight, self.model.pad_id
        return fixed_sequence_loss(states, weight, tgt_out, self.smoothing, pad_id)

    def __call__(self, batch: Batch) -> LossSums:
        """The batch's :class:`LossSums`; the first batch of each shape compiles (seconds to minutes)."""
        if self.compiled is None:  # the mode follows the device the batches arrive on
            graphs = batch.src.is_cuda and self.backend == "inductor"
            self.compiled = torch.compile(
                self.sums,
                backend=self.backend,
                mode="reduce-overhead" if graphs else None,
                dynamic=False,
                fullgraph=True,
            )
        if batch.src.shape not in self.seen:
            self.seen.add(batch.src.shape)
            self.first_step = (batch.src.shape, time.perf_counter())
        if batch.src.is_cuda:
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs may be overwritten
        loss, nll, correct = self.compiled(batch.src, batch.tgt_in, batch.tgt_out)
        return LossSums(loss, nll, correct, batch.tgt_real.numel())

    def step_ended(self) -> str | None:
        """After an optimizer step: the line saying how long a new shape's step took (its forward
        and backward compiled), or None."""
        if self.first_step is None:
            return None
        (rows, length), start = self.first_step
        self.first_step = None
        return (
            f"compiled the training step for batches of {rows} x {length} tokens in "
            f"{time.perf_counter() - start:.1f} s ({len(self.seen)} shapes so far)"
        )
