"""The export folder format, the second on-disk format beside the checkpoint's: what an exported
model directory holds besides the inference engine's own files, how it is written, and how it is
read back. The exporters (:mod:`seq2seq.export`) write it; the translators (:mod:`seq2seq.inference`)
read it.

An export is self-contained like a checkpoint: next to the engine's own files (CTranslate2's
``model.bin``, transformers' ``model.safetensors``, each with its ``config.json``), it keeps the
project's tokenizer (``tokenizer.json``, or one file per side) and ``seq2seq.json`` with the
engine, the model, decoding and data configs, so translating with it needs nothing else, and
``--eval test`` can rebuild the test split. ``seq2seq.json`` also lists the files the export
wrote: ``--force`` replaces those and keeps any other.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import torch

from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer
from seq2seq.formats.checkpoint import LoadedModel, ModelFacts
from seq2seq.model import Transformer

METADATA_FILE = "seq2seq.json"
CTRANSLATE2, TRANSFORMERS = "ctranslate2", "transformers"
# The engines an export folder is for, each with its exporter (seq2seq/export/__main__.py) and its
# translator (seq2seq/inference/backends.py); seq2seq.json's "format" is "seq2seq/<engine>".
ENGINES = (CTRANSLATE2, TRANSFORMERS)
VERSION = 1


class ExportError(ValueError):
    """An export cannot be written or read; the message is one line that names the cause."""


def save_bundle(directory: Path, loaded: LoadedModel, quantization: str, source: str, engine: str) -> None:
    """Write the tokenizer and ``seq2seq.json`` of ``loaded`` (exported from ``source``) to ``directory``."""
    loaded.tokenizer.save(directory)
    metadata = {
        "format": f"seq2seq/{engine}",
        "version": VERSION,
        "quantization": quantization,
        "source": source,
        "global_step": loaded.global_step,
        "best_bleu": loaded.best_bleu,
        "model_config": asdict(loaded.model.cfg),
        "decode_config": asdict(loaded.decode_config),
        "data_config": asdict(loaded.data_config),
    }
    (directory / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")


def is_export(directory: Path) -> bool:
    """Whether ``directory`` holds a seq2seq export (and may be replaced by a new one)."""
    return (directory / METADATA_FILE).is_file()


def check_export_target(out_dir: Path, force: bool) -> None:
    """Refuse to write over anything but an earlier export, and over that only when forced."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"{out_dir} exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not is_export(out_dir):
            raise ExportError(
                f"{out_dir} holds files that are not a seq2seq export; choose another directory"
            )
        if not force:
            raise ExportError(f"{out_dir} already holds an export; pass --force to replace it")


@contextlib.contextmanager
def staged_directory(out_dir: Path) -> Iterator[Path]:
    """A new directory beside ``out_dir`` that takes its place only if the block succeeds; what the
    user added to an earlier export there (a file no export wrote) moves into the new one.

    A failure (or Ctrl-C) midway leaves ``out_dir`` as it was and no partial directory behind.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = out_dir.with_name(f".{out_dir.name}.partial-{os.getpid()}")
    old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
    stage.mkdir()
    try:
        yield stage
        written = _record_files(stage)
        users = _added_by_user(out_dir, written) if out_dir.exists() else []
        if out_dir.exists():
            os.replace(out_dir, old)
        os.replace(stage, out_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    for name in users:  # an error here leaves the rest in `old`, not deleted
        os.replace(old / name, out_dir / name)
    shutil.rmtree(old, ignore_errors=True)


def _record_files(stage: Path) -> set[str]:
    """Record in ``seq2seq.json`` the names the export wrote, so that ``--force`` replaces only those."""
    names = {path.name for path in stage.iterdir()}
    metadata = json.loads((stage / METADATA_FILE).read_text(encoding="utf-8"))
    metadata["files"] = sorted(names)
    (stage / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    return names


def _added_by_user(out_dir: Path, new_files: set[str]) -> list[str]:
    """The names in the earlier export ``out_dir`` that its exporter did not write.

    An export written before seq2seq.json listed its files counts as the user's every name the new
    export does not write. A file of the user's that the new export would overwrite stops it.
    """
    names = {path.name for path in out_dir.iterdir()}
    try:
        listed = json.loads((out_dir / METADATA_FILE).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return sorted(names - new_files)
    users = sorted(names - set(listed))
    clash = [name for name in users if name in new_files]
    if clash:
        raise ExportError(
            f"{out_dir / clash[0]} was not written by the earlier export and the new one writes a file "
            "of that name: move it away first"
        )
    return users


def load_bundle(directory: str | Path) -> ModelFacts:
    """Read the configs and tokenizer of an export (the weights stay with the engine); every failure
    is an :class:`ExportError`."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ExportError(f"exported model not found: {directory} is not a directory")
    if not is_export(directory):
        raise ExportError(
            f"{directory} is not a seq2seq export (no {METADATA_FILE}; see python -m seq2seq.export)"
        )
    try:
        metadata = json.loads((directory / METADATA_FILE).read_text(encoding="utf-8"))
        engine = str(metadata.get("format")).removeprefix("seq2seq/")
        if engine not in ENGINES or metadata.get("version") != VERSION:
            raise ValueError(f"format {metadata.get('format')!r} version {metadata.get('version')!r}")
        model_config = ModelConfig(**metadata["model_config"])
        decode_config = DecodeConfig(**metadata["decode_config"])
        data_config = DataConfig(**metadata["data_config"])
        tokenizer = TranslationTokenizer.load(directory)
        with torch.device("meta"):  # the model's parameter count, without allocating its weights
            model = Transformer(model_config, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
        return ModelFacts(
            directory.name, engine, model_config, decode_config, data_config, tokenizer,
            model.num_parameters(),
            metadata.get("global_step"),  # exports written before these were recorded lack them
            metadata.get("best_bleu"),
        )  # fmt: skip
    except Exception as err:  # bad JSON, another version, a missing tokenizer file: all mean "unusable"
        message = str(err).splitlines()[0] if str(err) else ""
        raise ExportError(f"{directory}: unusable export ({type(err).__name__}: {message})") from err
