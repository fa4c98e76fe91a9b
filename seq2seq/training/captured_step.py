"""``compile=true`` with ``data.static_shapes=true``: the training step's forward and loss compiled as
one graph per batch shape (:mod:`seq2seq.capture`: CUDA graphs on a GPU). Backward follows the
graph; the optimizer is eager.
Inductor's compiled graphs persist in a folder of ``data.cache_dir`` keyed by torch, device and model
shape (:func:`compile_cache`), so a machine's later runs load them instead of compiling again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from seq2seq.capture import Captured
from seq2seq.data.batching import Batch
from seq2seq.model import Transformer
from seq2seq.training.loss import LossSums, fixed_sequence_loss

log = logging.getLogger(__name__)


def device_name(device: torch.device) -> str:
    """What compiled kernels are built for: the GPU's name and compute capability, or the CPU's
    architecture and the vector ISA torch dispatches to (e.g. ``x86_64 AVX512``)."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"cuda {props.name} sm_{props.major}{props.minor}"
    return f"{device.type} {platform.machine()} {torch.backends.cpu.get_cpu_capability()}"


def model_shape(model: Transformer) -> str:
    """The model's config and every parameter's name, shape and dtype: what its graphs are traced from."""
    params = (f"{name} {tuple(p.shape)} {p.dtype}" for name, p in model.named_parameters())
    return "\n".join([repr(model.cfg), *params])


def compile_cache(root: Path, torch_version: str, device: str, shape: str) -> Path:
    """The folder of compiled graphs under ``root`` for one torch version, device and model shape: a
    change of any of them names another folder, so no run loads graphs built for another."""
    key = hashlib.sha256("\0".join((torch_version, device, shape)).encode()).hexdigest()[:16]
    return root / "compile" / key


def use_compile_cache(folder: Path) -> None:
    """Points inductor's caches (its FX graphs, AOT autograd's forward and backward, Triton's
    kernels below them) at ``folder`` for the rest of the process: every compile after this reads
    and writes there. Every rank of a distributed run shares it: inductor writes each entry whole
    (a temporary file renamed), so a rank reads an entry complete or not at all."""
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)  # read by inductor at each compile
    torch._inductor.config.fx_graph_cache = True
    torch._functorch.config.enable_autograd_cache = True


class CapturedStep:
    """The loss sums of a training batch through ``model``, compiled at the batch's fixed shape.

    Each batch shape compiles once, at its first batch (the one call that may compile). The loss is
    over fixed positions and the token count is the batch's own: nothing in the graph depends on the
    ids' values. ``backend``: torch.compile's (:data:`seq2seq.capture.BACKEND` unless given);
    ``"cudagraphs"`` records CUDA graphs of the traced step without generating kernels
    (``python -m bench.train.step --capture`` times both).
    ``cache_root``: where inductor's graphs persist (:func:`compile_cache`); None: inductor's default.
    """

    def __init__(
        self,
        model: Transformer,
        smoothing: float,
        backend: str | Callable | None = None,
        cache_root: Path | None = None,
    ) -> None:
        self.model, self.smoothing = model, smoothing
        self.backend = backend
        self.cache_root = cache_root
        self.compiled: Captured[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]] | None = None
        self.seen: set[torch.Size] = set()
        self.first_step: tuple[torch.Size, float] | None = None  # a new shape's step: (shape, start)
        self.compiled_seconds = 0.0  # the ended steps of new shapes, each compiling its forward and backward

    def sums(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """What is compiled: the forward and the loss, NLL and hits summed over fixed positions."""
        memory, src_mask = self.model.encode(src)
        states = self.model.decode_states(tgt_in, memory, src_mask)  # (B, T, D)
        weight, pad_id = self.model.generator.weight, self.model.pad_id
        return fixed_sequence_loss(states, weight, tgt_out, self.smoothing, pad_id)

    def __call__(self, batch: Batch) -> LossSums:
        """The batch's :class:`LossSums`; the first batch of each shape compiles (seconds to minutes)."""
        if self.compiled is None:  # the mode and the cache's key follow the device the batches arrive on
            self.compiled = Captured(self.sums, batch.src.device, self.backend)
            if self.cache_root is not None and self.compiled.backend == "inductor":
                version = f"{torch.__version__} {torch.version.git_version}"
                shape = model_shape(self.model)
                folder = compile_cache(self.cache_root, version, device_name(batch.src.device), shape)
                use_compile_cache(folder)
                log.info("compiled graphs cached in %s", folder)
        new_shape = batch.src.shape not in self.seen
        if new_shape:
            self.seen.add(batch.src.shape)
            self.first_step = (batch.src.shape, time.perf_counter())
        loss, nll, correct = self.compiled(new_shape, batch.src, batch.tgt_in, batch.tgt_out)
        return LossSums(loss, nll, correct, batch.tgt_real.numel())

    def step_ended(self) -> str | None:
        """After an optimizer step: the line saying how long a new shape's step took (its forward
        and backward compiled), or None."""
        if self.first_step is None:
            return None
        (rows, length), start = self.first_step
        self.first_step = None
        seconds = time.perf_counter() - start
        self.compiled_seconds += seconds
        return (
            f"compiled the training step for batches of {rows} x {length} tokens in {seconds:.1f} s "
            f"({len(self.seen)} shapes so far, {self.compiled_seconds:.1f} s in all)"
        )

    @property
    def compile_seconds(self) -> float:
        """Seconds the steps of new shapes took so far, a step still being logged included."""
        pending = 0.0 if self.first_step is None else time.perf_counter() - self.first_step[1]
        return self.compiled_seconds + pending
