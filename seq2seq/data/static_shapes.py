"""Static batch shapes (``data.static_shapes``): few (B, S) = (B, T) shapes, so a captured GPU step
(CUDA graphs, ``torch.compile(mode="reduce-overhead")``) replays instead of capturing each new shape.

A pair's padded length is rounded up to a rung of a short ladder (geometric, or the rungs
``data.shape_rungs`` names), a batch is packed on those lengths, and its tensors are padded to its
rung and to that rung's fixed number of rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from seq2seq.config import DataConfig
from seq2seq.data.batching import Batch
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID

GROWTH = 1.125  # each rung at most this much longer than the last, rounded up: pads a pair by ~1/8 at most
SHORTEST = 4  # the first rung: shorter pairs are rare, and a rung of their own adds a shape for nothing


def ladder(longest: int, growth: float = GROWTH) -> tuple[int, ...]:
    """Rung lengths from :data:`SHORTEST` up to ``longest`` (the longest padded length allowed),
    each ``growth`` times the last, rounded up, and at least one token longer."""
    rungs = [min(SHORTEST, longest)]
    while rungs[-1] < longest:
        rungs.append(min(longest, max(rungs[-1] + 1, math.ceil(rungs[-1] * growth))))
    return tuple(rungs)


@dataclass(frozen=True)
class StaticShapes:
    """The ladder of rung lengths and the token budget that fixes each rung's number of rows."""

    rungs: tuple[int, ...]
    max_tokens: int

    @classmethod
    def of(
        cls, max_length: int, max_tokens: int, growth: float = GROWTH, rungs: tuple[int, ...] = ()
    ) -> StaticShapes:
        """The shapes of training batches of pairs up to ``max_length`` tokens a side (+1 special):
        on the given ``rungs`` (increasing) topped by ``max_length + 1``, else a geometric ladder."""
        if not rungs:
            return cls(ladder(max_length + 1, growth), max_tokens)
        return cls(tuple(sorted({*rungs, max_length + 1})), max_tokens)

    @classmethod
    def of_config(cls, cfg: DataConfig) -> StaticShapes:
        """The training batches' shapes under ``cfg`` (``data.shape_rungs`` or the default ladder)."""
        return cls.of(cfg.max_length, cfg.max_tokens, rungs=tuple(cfg.shape_rungs or ()))

    def rounded(self, lengths: np.ndarray) -> np.ndarray:
        """Each padded length (N,) rounded up to its rung, what batches are packed on: (N,)."""
        return np.asarray(self.rungs)[np.searchsorted(self.rungs, lengths)]

    def rebinned(self, histogram: np.ndarray) -> np.ndarray:
        """Histograms (..., L) of padded lengths up to the top rung (L - 1 at most) as histograms of
        their rungs, same shape: what :func:`~seq2seq.data.batching.pack_count` counts batches of."""
        rungs = self.rounded(np.arange(histogram.shape[-1]))  # (L,), non-decreasing
        first = np.flatnonzero(np.diff(rungs, prepend=-1))  # the first length of each rung
        rebinned = np.zeros_like(histogram)
        rebinned[..., rungs[first]] = np.add.reduceat(histogram, first, axis=-1)
        return rebinned

    def shape(self, length: int) -> tuple[int, int]:
        """(rows, rung) of every batch whose longest pair is ``length`` tokens long, padded."""
        rung = int(self.rounded(np.asarray([length]))[0])
        return self.max_tokens // rung, rung

    def pad(self, batch: Batch) -> Batch:
        """``batch`` padded to its rung's shape: PAD columns, then filler rows of an empty pair whose
        target ends in no EOS: a lone EOS as source and a lone BOS as decoder input give every
        softmax a key (over masked keys alone it is 0/0, a NaN that would reach the gradients), and
        a target of PAD alone adds no token to the loss, hence nothing to any gradient."""
        rows, rung = self.shape(max(batch.src.size(1), batch.tgt_in.size(1)))
        fill = rows - batch.src.size(0)
        if fill < 0:
            raise ValueError(f"a batch of {batch.src.size(0)} pairs exceeds the {rows} rows of length {rung}")
        src, tgt_in, tgt_out = (_padded(ids, rows, rung) for ids in (batch.src, batch.tgt_in, batch.tgt_out))
        src[rows - fill :, 0], tgt_in[rows - fill :, 0] = EOS_ID, BOS_ID
        # the fillers' EOS is no real source token: tokens/s counts the batch's own
        return Batch.of(src, tgt_in, tgt_out)._replace(src_tokens=batch.src_tokens)


def _padded(ids: torch.Tensor, rows: int, length: int) -> torch.Tensor:
    """Ids (B, L) right-padded with PAD_ID to (rows, length)."""
    return F.pad(ids, (0, length - ids.size(1), 0, rows - ids.size(0)), value=PAD_ID)


def static_collate(
    examples: list[dict], collate: Callable[[list[dict]], Batch], shapes: StaticShapes
) -> Batch:
    """``collate``'s batch of ``examples``, padded to its rung's shape."""
    return shapes.pad(collate(examples))
