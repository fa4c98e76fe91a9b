"""A lexical shortlist: the target types a batch's output may use, and its file format.

For each source type, the target types that co-occur with it most specifically in the training
pairs (ranked by the Dice coefficient, so that "de" and "la" do not fill every list); for a batch,
the union of its source types' lists, the most frequent target types, the special tokens and, with
a shared vocabulary, the source types themselves (names and numbers are copied). The search then
projects onto those C types only (:class:`~seq2seq.decoding.steps.CachedSteps`). Built by
``python -m seq2seq.inference.shortlist``; this module owns the file (:meth:`Shortlist.save`, :meth:`load`).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from seq2seq.config import SpecialIds

FILE_NAME = "shortlist.npz"  # beside the checkpoints it was built for
FORMAT_VERSION = 1
HOW_TO_BUILD = "build it with python -m seq2seq.inference.shortlist --ckpt CKPT"


class ShortlistError(ValueError):
    """A shortlist file that is missing, unreadable or built for another vocabulary."""


@dataclass(frozen=True)
class Shortlist:
    """Per source type, its candidate target types (CSR: ``targets[offsets[s]:offsets[s + 1]]``)."""

    offsets: np.ndarray  # (V_src + 1,) int64
    targets: np.ndarray  # (total,) int64 target ids
    frequent: np.ndarray  # (N,) int64: the N most frequent target types
    tgt_vocab_size: int
    copy_source: bool  # a shared vocabulary: the source types are candidates too
    tokenizer: str  # fingerprint of the tokenizer whose ids these are

    @property
    def src_vocab_size(self) -> int:
        return self.offsets.size - 1

    def candidates(self, sources: list[list[int]], special: SpecialIds) -> Tensor:
        """Sorted vocabulary ids (C,) the output of these encoded sources may use."""
        present = np.unique(np.concatenate([np.asarray(ids, dtype=np.int64) for ids in sources]))
        keep = np.zeros(self.tgt_vocab_size, dtype=bool)
        keep[self.frequent] = True
        keep[list(astuple(special))] = True
        for s in present.tolist():
            keep[self.targets[self.offsets[s] : self.offsets[s + 1]]] = True
        if self.copy_source:
            keep[present[present < self.tgt_vocab_size]] = True
        return torch.from_numpy(np.flatnonzero(keep))

    def save(self, path: str | Path) -> None:
        arrays = {"offsets": self.offsets, "targets": self.targets, "frequent": self.frequent}
        facts = {
            "tgt_vocab_size": self.tgt_vocab_size,
            "copy_source": self.copy_source,
            "tokenizer": self.tokenizer,
        }
        with open(path, "wb") as handle:  # a file object: given a name, np.savez would add ".npz"
            np.savez(
                handle,
                version=np.array(FORMAT_VERSION),
                **arrays,
                **{k: np.array(v) for k, v in facts.items()},
            )

    @classmethod
    def load(cls, path: str | Path, tokenizer: str) -> Shortlist:
        """The shortlist at ``path``, which must have been built for the tokenizer ``tokenizer``."""
        try:
            with np.load(path, allow_pickle=False) as data:
                version = int(data["version"])
                if version == FORMAT_VERSION:
                    shortlist = cls(
                        *(data[key].astype(np.int64) for key in ("offsets", "targets", "frequent")),
                        int(data["tgt_vocab_size"]),
                        bool(data["copy_source"]),
                        str(data["tokenizer"]),
                    )
        except (OSError, KeyError, ValueError) as err:
            raise ShortlistError(f"cannot read shortlist {path}: {err} ({HOW_TO_BUILD})") from err
        if version != FORMAT_VERSION:
            raise ShortlistError(f"shortlist {path} has format {version}, this code reads {FORMAT_VERSION}")
        if shortlist.tokenizer != tokenizer:
            raise ShortlistError(f"shortlist {path} was built for another tokenizer ({HOW_TO_BUILD})")
        return shortlist


def default_path(ckpt: str | Path) -> Path:
    """Where the shortlist of a checkpoint is kept: beside it, shared by a run's checkpoints."""
    return Path(ckpt).with_name(FILE_NAME)
