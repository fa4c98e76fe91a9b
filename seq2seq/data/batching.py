"""Token-budget batches of similar-length pairs, and the collate that adds BOS/EOS.

Fixed-size random batches waste most of their compute on padding because sentence lengths vary
several-fold; sorting by length and packing up to a budget of padded tokens keeps padding low and
memory use flat. Training's sampler (:mod:`seq2seq.data.sampler`) and the Translator both pack here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID


class Batch(NamedTuple):
    """Padded id tensors: src (B, S), tgt_in (B, T) = BOS + y, tgt_out (B, T) = y + EOS; and what
    the step needs to know of its real (non-pad) tokens, counted on the host when the batch is made
    (:meth:`of`), so that a step on a GPU never waits for the device to count them."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_real: torch.Tensor  # (N,) positions of tgt_out's real tokens in its flattened (B·T,) view
    src_tokens: int  # real source tokens

    @classmethod
    def of(cls, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> Batch:
        """The batch of these id tensors, its real tokens counted where they are (the host, in a loader)."""
        tgt_real = (tgt_out != PAD_ID).flatten().nonzero().squeeze(1)  # (N,)
        return cls(src, tgt_in, tgt_out, tgt_real, int((src != PAD_ID).sum()))

    def real_tokens(self) -> int:
        """Source and target tokens that are not padding: what tokens/s counts."""
        return self.src_tokens + self.tgt_real.numel()

    def to(self, device: torch.device | str) -> Batch:
        """The batch's tensors on ``device``."""
        return self._replace(**{name: getattr(self, name).to(device) for name in TENSORS})


TENSORS = ("src", "tgt_in", "tgt_out", "tgt_real")  # the fields of a Batch that are tensors


def pair_lengths(src_len: np.ndarray, tgt_len: np.ndarray) -> np.ndarray:
    """Padded cost of one pair: the source gets EOS, the target BOS or EOS, shape (N,)."""
    return np.maximum(src_len + 1, tgt_len + 1)


def too_long(lengths: np.ndarray, max_length: int) -> np.ndarray:
    """Which pairs of :func:`pair_lengths` ``lengths`` have a side over ``max_length`` tokens, shape (N,)."""
    return lengths > max_length + 1  # a length counts one special token


def pad_ids(rows: list[list[int]]) -> torch.Tensor:
    """Right-pad id lists with PAD_ID into one (B, longest) long tensor."""
    out = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def collate(examples: list[dict]) -> Batch:
    """Turn ``{"src_ids", "tgt_ids"}`` dicts (no specials yet) into a padded :class:`Batch`."""
    src = pad_ids([[*ex["src_ids"], EOS_ID] for ex in examples])  # (B, S)
    tgt_in = pad_ids([[BOS_ID, *ex["tgt_ids"]] for ex in examples])  # (B, T)
    tgt_out = pad_ids([[*ex["tgt_ids"], EOS_ID] for ex in examples])  # (B, T)
    return Batch.of(src, tgt_in, tgt_out)


def pack(order: np.ndarray, lengths: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Greedy packing of the indices ``order`` (by ascending length) into batches whose padded size,
    batch size × longest length, stays within ``max_tokens``; one longer than that is a batch of its own.

    Training batches and the Translator's batches are both packed here.
    """
    sorted_lengths = lengths[order]
    batches, start = [], 0
    while start < len(order):
        capacity = max(1, max_tokens // sorted_lengths[start])  # no batch from here can be larger
        window = sorted_lengths[start : start + capacity]
        cost = np.arange(1, len(window) + 1) * window  # padded cost of each prefix, non-decreasing
        size = max(1, int(np.searchsorted(cost, max_tokens, side="right")))
        batches.append(order[start : start + size])
        start += size
    return batches


def pack_count(histogram: np.ndarray, max_tokens: int) -> int:
    """How many batches :func:`pack` makes of pairs whose lengths ``histogram`` counts (``histogram[l]``
    pairs of padded length ``l``), without sorting them: packing sorted lengths depends on the lengths
    alone, not on which pair has which. A run of ``n`` pairs of one length makes ``n // capacity`` full
    batches; what is left of it opens a batch that longer pairs fill while it stays within the budget.
    """
    counts = [[length, int(count)] for length, count in enumerate(histogram) if count]
    batches, at = 0, 0
    while at < len(counts):
        length, left = counts[at]
        full, size = divmod(left, max(1, max_tokens // length))
        batches += full
        at += 1
        if size == 0:
            continue
        batches += 1  # the rest of this length opens a batch that longer pairs may fill
        while at < len(counts):
            room = max_tokens // counts[at][0] - size
            if room <= 0:
                break
            taken = min(room, counts[at][1])
            size += taken
            counts[at][1] -= taken
            if counts[at][1]:
                break
            at += 1
    return batches


Stop = tuple[int, int]  # (world_size, batches each rank had done) when a run over an epoch stopped
