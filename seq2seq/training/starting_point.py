"""The checkpoints a run starts from, opened and checked against the run before it writes anything,
so that a wrong path costs one line. ``init_from``: a new run from a trained model's weights and
tokenizer and from nothing else (its optimizer, schedule, budget and data order are new).
``ckpt_path``: the run it names, resumed."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from seq2seq.config import ConfigError, DataConfig, ModelConfig, RunConfig
from seq2seq.formats.checkpoint import CheckpointError, LoadedModel, load_model, stored_configs
from seq2seq.training.module import TranslationModule

log = logging.getLogger(__name__)

FREE_MODEL_KEYS = ("dropout", "attention_dropout")  # may differ: they shape training, not the weights
TOKENIZER_KEYS = ("tokenizer", "tokenizer_file", "vocab_size", "shared_vocab")  # what made the tokenizer


def open_start(run: RunConfig) -> LoadedModel | None:
    """The checkpoint ``init_from`` names, None when it names none, after both starting points are
    checked: each must be a readable seq2seq checkpoint (not empty, cut short or text) of the run's
    model and tokenizer, else a one-line :class:`ConfigError` names the key and why. ``ckpt_path``
    is read for its entry only, its tensors left on disk: Lightning loads it to resume."""
    if run.ckpt_path is not None:
        with _named("ckpt_path", run.ckpt_path):
            stored = stored_configs(run.ckpt_path)
        check_agrees(*stored, run, f"ckpt_path: {run.ckpt_path}")
    if run.init_from is None:
        return None
    with _named("init_from", run.init_from):
        start = load_model(run.init_from)  # its weights checked against its own config, too
    check_agrees(start.model_config, start.data_config, run, f"init_from: {run.init_from}")
    return start


@contextlib.contextmanager
def _named(key: str, path: str) -> Iterator[None]:
    """A missing or unreadable checkpoint as a one-line :class:`ConfigError` headed ``key``."""
    if not Path(path).is_file():
        raise ConfigError(f"{key}: no checkpoint at {path}")
    try:
        yield
    except CheckpointError as err:
        raise ConfigError(f"{key}: {err}") from err


def override_text(value: Any) -> str:
    """A value as an override writes it: true, null, [a,b], a path quoted where Hydra's grammar needs it."""
    if isinstance(value, str):
        return value if re.fullmatch(r"[\w./+-]+", value) else json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def check_agrees(model: ModelConfig, data: DataConfig, run: RunConfig, named: str) -> None:
    """The run's model and tokenizer keys must be a checkpoint's (``model``, ``data``), so the weights
    fit and mean the same tokens, and so does its direction; one line per key that differs, each
    headed ``named`` (the key and the path)."""
    theirs = {f"model.{key}": value for key, value in asdict(model).items()}
    ours = {f"model.{key}": value for key, value in asdict(run.model).items()}
    for key in (*TOKENIZER_KEYS, "direction"):
        theirs[f"data.{key}"], ours[f"data.{key}"] = getattr(data, key), getattr(run.data, key)
    free = {f"model.{key}" for key in FREE_MODEL_KEYS}
    differ = [key for key in theirs if key not in free and theirs[key] != ours[key]]
    if differ:
        raise ConfigError(
            "\n".join(
                f"{named} has {key}={override_text(theirs[key])}, this run {key}={override_text(ours[key])}: "
                "set it as the checkpoint has it"
                for key in differ
            )
        )


def load_weights(module: TranslationModule, start: LoadedModel) -> None:
    """The checkpoint's weights (those inference loads: its EMA where it kept one) become both the
    trained weights and, where the run keeps one, their moving average."""
    weights = start.model.state_dict()
    module.model.load_state_dict(weights)
    if module.ema_model is not None:
        module.ema_model.load_state_dict(weights)
    log.info(
        "init_from: the weights of %s (step %s); new optimizer, schedule, budget and data order",
        start.name,
        "unknown" if start.global_step is None else start.global_step,
    )
