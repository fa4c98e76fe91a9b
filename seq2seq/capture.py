"""How a step is compiled at fixed shapes on its device, for the training step
(:mod:`seq2seq.training.captured_step`) and the decoder step (:mod:`seq2seq.decoding.captured_steps`)
alike: one whole graph per shape (``dynamic=False``, ``fullgraph=True``), replayed as CUDA graphs on
a GPU (``mode="reduce-overhead"``), where a step's time is its kernel launches, and compiled the same
way, without them, on a CPU.

Dynamo compiles one function at most ``torch._dynamo.config.recompile_limit`` times (8), then runs
it eagerly. A captured step compiles once per shape its caller has not met, and the caller bounds
those (a ladder's rungs, a decoder's buckets), so only those calls run with the limit lifted
(:func:`new_shapes_allowed`); every other compile of the process, and a step that would compile
again at a shape already met, keep the process's limit.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, ParamSpec, TypeVar

import torch

BACKEND = "inductor"  # torch.compile's; tests use "aot_eager", which builds no kernels

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def new_shapes_allowed() -> Iterator[None]:
    """Dynamo's recompile limit lifted inside the block, and restored after it."""
    with torch._dynamo.config.patch(recompile_limit=sys.maxsize):
        yield


class Captured(Generic[P, R]):
    """``fn`` compiled at fixed shapes for ``device``. ``backend``: torch.compile's, :data:`BACKEND`
    unless given; CUDA graphs need inductor (or ``"cudagraphs"``, which records them without
    generating kernels)."""

    def __init__(
        self, fn: Callable[P, R], device: torch.device, backend: str | Callable | None = None
    ) -> None:
        self.backend = BACKEND if backend is None else backend
        self.on_gpu = device.type == "cuda"
        mode = "reduce-overhead" if self.on_gpu and self.backend == "inductor" else None
        self.compiled = torch.compile(fn, backend=self.backend, mode=mode, dynamic=False, fullgraph=True)

    def __call__(self, new_shape: bool, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)``, compiling first when ``new_shape`` (the caller's first call at a
        shape). On a GPU each call is a new graph step: the last call's outputs may be overwritten, so
        a caller copies out what it keeps before calling again."""
        if self.on_gpu:
            torch.compiler.cudagraph_mark_step_begin()
        if not new_shape:
            return self.compiled(*args, **kwargs)
        with new_shapes_allowed():
            return self.compiled(*args, **kwargs)
