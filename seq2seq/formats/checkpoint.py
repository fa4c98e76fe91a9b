"""The checkpoint format: what a checkpoint carries so that inference needs nothing but the file,
and how it is written and read back.

Lightning checkpoints get one extra entry, ``checkpoint["seq2seq"]``: the model config, the
vocabulary sizes, the decoding settings used for validation, the data config, the tokenizer as
JSON, the best validation BLEU and the prefix of the weights inference loads. All of it is plain
data and tensors, so it loads with ``torch.load(weights_only=True)`` and cannot run code. Files are
written to a temporary name, flushed and renamed into place. :class:`ModelFacts` is what a model
file says of its model, a checkpoint or an export folder alike.
"""

from __future__ import annotations

import codecs
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer
from seq2seq.formats.output_file import written_whole
from seq2seq.model import Transformer

KEY = "seq2seq"
PYTORCH = "pytorch"  # the engine that runs a checkpoint: the PyTorch Transformer itself


class CheckpointError(RuntimeError):
    """The file is missing, unreadable, unwritable, or not a seq2seq checkpoint."""


def seq2seq_entry(
    model_cfg: ModelConfig,
    decode_cfg: DecodeConfig,
    data_cfg: DataConfig,
    tokenizer: TranslationTokenizer,
    weights_prefix: str,
    best_bleu: float = 0.0,
) -> dict[str, Any]:
    """The ``checkpoint["seq2seq"]`` entry; the data config lets evaluation rebuild the splits.

    ``weights_prefix``: the state-dict prefix of the weights inference loads, as the writer names them.
    """
    return {
        "model_config": asdict(model_cfg),
        "decode_config": asdict(decode_cfg),
        "data_config": asdict(data_cfg),
        "tokenizer": tokenizer.to_dict(),
        "src_vocab_size": tokenizer.src_vocab_size,
        "tgt_vocab_size": tokenizer.tgt_vocab_size,
        "best_bleu": best_bleu,
        "weights_prefix": weights_prefix,
    }


class ResumeState(NamedTuple):
    """What resuming training takes back from the entry."""

    tokenizer: TranslationTokenizer | None  # None in a checkpoint without an entry
    best_bleu: float


def resume_state(checkpoint: dict[str, Any]) -> ResumeState:
    """The tokenizer and the best validation BLEU so far, from a checkpoint being resumed."""
    meta = checkpoint.get(KEY, {})
    tokenizer = TranslationTokenizer.from_dict(meta["tokenizer"]) if "tokenizer" in meta else None
    return ResumeState(tokenizer, meta.get("best_bleu", 0.0))


def save_atomically(checkpoint: dict[str, Any], path: str | Path) -> None:
    """Write ``checkpoint`` whole (:func:`~seq2seq.formats.output_file.written_whole`): a kill never
    leaves half a file. A failed write (disk full, directory gone) removes the partial file, keeps
    the previous checkpoint as it was, and raises a one-line :class:`CheckpointError`.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with written_whole(path, binary=True, one_partial=True) as handle:
            torch.save(checkpoint, handle)
    except (OSError, RuntimeError) as err:  # torch reports some failed writes as RuntimeError
        reason = getattr(err, "strerror", None) or _first_line(err)
        raise CheckpointError(f"cannot write checkpoint {path}: {reason}") from err


@dataclass(frozen=True)
class ModelFacts:
    """What a model file says of its model, for a checkpoint and an export folder alike: the one
    record that translate.py, serve.py and the benchmarks read (see ``open_model``)."""

    name: str  # the checkpoint file's or the export folder's
    engine: str  # what runs it: PYTORCH for a checkpoint, else the export's engine
    model_config: ModelConfig
    decode_config: DecodeConfig  # the settings validation decoded with
    data_config: DataConfig  # the training data's, so that --eval can rebuild its test split
    tokenizer: TranslationTokenizer
    parameters: int
    global_step: int | None = None  # optimiser steps trained; None for a file not written by training
    best_bleu: float | None = None  # the best validation BLEU when it was written

    @property
    def attention(self) -> bool:
        """Whether its attention weights can be shown: only the PyTorch model returns them."""
        return self.engine == PYTORCH


@dataclass(frozen=True, kw_only=True)
class LoadedModel(ModelFacts):
    """A checkpoint's record with its PyTorch model, in eval mode, ready to run."""

    model: Transformer

    @classmethod
    def from_model(
        cls,
        model: Transformer,
        name: str,
        tokenizer: TranslationTokenizer,
        decode_config: DecodeConfig,
        data_config: DataConfig,
        global_step: int | None = None,
        best_bleu: float | None = None,
    ) -> LoadedModel:
        """The record of ``model`` (its config and parameter count are the model's own)."""
        return cls(
            name, PYTORCH, model.cfg, decode_config, data_config, tokenizer, model.num_parameters(),
            global_step, best_bleu, model=model,
        )  # fmt: skip


def _why_unreadable(path: Path, err: Exception) -> str:
    """What is wrong with a file ``torch.load`` failed on, told from its first bytes: torch's own
    message can be empty (a 0-byte file), a bare index (text), a paragraph (a truncated zip) or
    EINVAL (a zip cut within its first kilobytes)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(512)
    except OSError as again:
        return again.strerror or str(again)
    if not head:
        return "the file is empty (0 bytes)"
    if head.startswith(b"PK") and not zipfile.is_zipfile(path):
        return f"the file is truncated ({path.stat().st_size:,} bytes, its zip archive has no end)"
    if not head.startswith((b"PK", b"\x80")):  # torch writes a zip archive (or, before 1.6, a pickle)
        return "it holds text, not a PyTorch checkpoint" if _is_text(head) else "not a PyTorch file"
    if isinstance(err, OSError):
        return err.strerror or str(err)
    return _first_line(err)


def _is_text(head: bytes) -> bool:
    """Whether a file's first bytes read as UTF-8 text; incremental, as the last character may be cut."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head)
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head


def _first_line(err: Exception) -> str:
    """The first line of ``err``'s message, or its type's name when it has none."""
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def read_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu", mmap: bool = False
) -> dict[str, Any]:
    """``torch.load`` of tensors and plain data only; every failure becomes :class:`CheckpointError`.
    ``mmap`` maps the tensors instead of reading them: for a caller that reads only the entry."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as err:  # truncated zip, pickle error, wrong file type: all mean "unreadable"
        raise CheckpointError(f"cannot read checkpoint {path}: {_why_unreadable(path, err)}") from err
    if not isinstance(checkpoint, dict) or KEY not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path} is not a seq2seq checkpoint (no model config/tokenizer inside)")
    return checkpoint


def stored_model_config(path: str | Path) -> ModelConfig:
    """The model config a checkpoint stores, its tensors left on disk; a bad entry is a CheckpointError."""
    return _stored(read_checkpoint(path, mmap=True)[KEY], path, ModelConfig, "model_config")


def stored_data_config(path: str | Path) -> DataConfig:
    """The data config a checkpoint stores (its tokenizer's keys among them), its tensors left on disk."""
    return _stored(read_checkpoint(path, mmap=True)[KEY], path, DataConfig, "data_config")


def stored_configs(path: str | Path) -> tuple[ModelConfig, DataConfig]:
    """The model and data configs a checkpoint stores, read at once, its tensors left on disk."""
    entry = read_checkpoint(path, mmap=True)[KEY]
    return _stored(entry, path, ModelConfig, "model_config"), _stored(entry, path, DataConfig, "data_config")


def _stored(entry: dict[str, Any], path: str | Path, schema: type, name: str) -> Any:
    try:
        return schema(**entry[name])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: unusable seq2seq entry ({type(err).__name__}: {err})") from err


def weights(checkpoint: dict[str, Any], prefix: str | None = None) -> dict[str, torch.Tensor]:
    """The weights under ``prefix``, named as the Transformer names them; by default those the entry's
    ``weights_prefix`` names, which inference loads (the validated ones: the EMA when trained with it)."""
    prefix = prefix or checkpoint[KEY]["weights_prefix"]
    return {
        name[len(prefix) :]: tensor
        for name, tensor in checkpoint["state_dict"].items()
        if name.startswith(prefix)
    }


def load_model(path: str | Path, map_location: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild the Transformer and tokenizer from a checkpoint, in eval mode."""
    path = Path(path)
    checkpoint = read_checkpoint(path, map_location)
    meta = checkpoint[KEY]
    try:
        model_cfg = ModelConfig(**meta["model_config"])
        decode_cfg = DecodeConfig(**meta["decode_config"])
        data_cfg = DataConfig(**meta["data_config"])
        tokenizer = TranslationTokenizer.from_dict(meta["tokenizer"])
        vocab_sizes = meta["src_vocab_size"], meta["tgt_vocab_size"]
        shipped = weights(checkpoint, meta["weights_prefix"])
    except Exception as err:  # another version's or a hand-edited entry; tokenizers raises bare Exception
        raise CheckpointError(f"{path}: unusable seq2seq entry ({type(err).__name__}: {err})") from err
    if (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size) != vocab_sizes:
        raise CheckpointError(
            f"{path}: its tokenizer ({tokenizer.src_vocab_size}/{tokenizer.tgt_vocab_size} tokens) does not "
            f"belong to its model ({vocab_sizes[0]}/{vocab_sizes[1]})"
        )
    model = Transformer(model_cfg, *vocab_sizes)
    try:
        model.load_state_dict(shipped)
    except RuntimeError as err:
        raise CheckpointError(f"{path}: weights do not match its model config: {_first_line(err)}") from err
    return LoadedModel.from_model(
        model.to(map_location).eval(),
        path.name,
        tokenizer,
        decode_cfg,
        data_cfg,
        checkpoint.get("global_step"),
        meta.get("best_bleu"),
    )
