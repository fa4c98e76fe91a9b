"""Validation decoding split across the processes of a distributed run.

Decoding the validation split is most of a validation's time, so each rank decodes only a balanced
share of the sources. The hypotheses are then all-gathered (not gathered to rank 0): every rank
scores the whole split and ends with the identical ``val/bleu``, which it needs because
ModelCheckpoint and EarlyStopping run on every rank and must take the same decision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch.distributed as dist


def shard(lengths: Sequence[int], rank: int, world_size: int) -> list[int]:
    """Indices of the sources ``rank`` decodes: sorted longest first and dealt round-robin, so every
    rank gets about as many sentences and as much text as the others."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties keep source order
    return order[rank::world_size]


def unshard(parts: Sequence[list[str]], lengths: Sequence[int]) -> list[str]:
    """Every rank's hypotheses (``parts[rank]``, in :func:`shard` order) back in source order."""
    merged = [""] * len(lengths)
    for rank, hypotheses in enumerate(parts):
        for index, hypothesis in zip(shard(lengths, rank, len(parts)), hypotheses, strict=True):
            merged[index] = hypothesis
    return merged


def translate_sharded(
    translate: Callable[[list[str]], list[str]], sources: list[str], rank: int, world_size: int
) -> list[str]:
    """The hypotheses of all ``sources`` in their order, each rank decoding only its share.

    Every rank must call this together (it all-gathers); with one process it is ``translate(sources)``.
    """
    if world_size == 1:
        return translate(sources)
    lengths = [len(source) for source in sources]
    mine = [sources[i] for i in shard(lengths, rank, world_size)]
    parts: list[list[str]] = [[] for _ in range(world_size)]
    dist.all_gather_object(parts, translate(mine) if mine else [])  # gloo and nccl alike
    return unshard(parts, lengths)
