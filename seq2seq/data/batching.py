"""Token-budget batches of similar-length pairs, and the collate that adds BOS/EOS.

Fixed-size random batches waste most of their compute on padding because sentence
lengths vary several-fold; sorting by length and packing up to a budget of padded
tokens keeps padding low and memory use flat. All randomness derives from
(seed, epoch), so every rank computes the same batch list without communicating
and a resumed run sees the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import Sampler

from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


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


Stop = tuple[int, int]  # (world_size, batches each rank had done) when a run over an epoch stopped


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
    earlier runs trained of it; in training, :class:`seq2seq.data.resume.BatchOrder` calls both.
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
