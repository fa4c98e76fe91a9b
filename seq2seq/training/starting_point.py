"""The checkpoints a run starts from, opened and checked against the run before it writes anything,
so that a wrong path costs one line. ``init_from``: a new run from a trained model's weights and
tokenizer and from nothing else (its optimizer, schedule, budget and data order are new).
``ckpt_path``: the run it names, resumed."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from seq2seq.config import ConfigError, RunConfig
from seq2seq.formats.checkpoint import (
    CheckpointError,
    LoadedModel,
    load_model,
    stored_data_config,
    stored_model_config,
)
from seq2seq.training.module import TranslationModule

log = logging.getLogger(__name__)

FREE_MODEL_KEYS = ("dropout", "attention_dropout")  # may differ: they shape training, not the weights
TOKENIZER_KEYS = ("tokenizer", "tokenizer_file", "vocab_size", "shared_vocab")  # what made the tokenizer


def open_start(run: RunConfig) -> LoadedModel | None:
    """The checkpoint ``init_from`` names, None when it names none, after both starting points are
    checked: each must be a readable seq2seq checkpoint (not empty, cut short or text) of the run's
    model and tokenizer, else a one-line :class:`ConfigError` names the key and why."""
    _opened("ckpt_path", run.ckpt_path, run)  # resumed by Lightning, which loads it again
    return _opened("init_from", run.init_from, run)


def _opened(key: str, path: str | None, run: RunConfig) -> LoadedModel | None:
    if path is None:
        return None
    if not Path(path).is_file():
        raise ConfigError(f"{key}: no checkpoint at {path}")
    try:
        start = load_model(path)  # its weights checked against its own config, too
    except CheckpointError as err:
        raise ConfigError(f"{key}: {err}") from err
    check_agrees(start, run, f"{key}: {path}")
    return start


def start_overrides(overrides: list[str]) -> tuple[list[str], str | None]:
    """The overrides that give a run started ``init_from=CKPT`` its checkpoint's model, whatever model
    group the recipe picks (unless the command line picks one itself), and the keys that made its
    tokenizer, which the run keeps; and the checkpoint's path. None where the command line names no
    readable checkpoint (:func:`open_start` then says why). Placed before the command line's own
    overrides, which win: ``model.dropout=0.2`` still applies, and a tokenizer key set to another
    value is :func:`check_agrees`'s error."""
    given = {arg.lstrip("+").split("=", 1)[0]: arg.split("=", 1)[1] for arg in overrides if "=" in arg}
    path = given.get("init_from")
    if path is None or not Path(path).is_file():
        return [], None
    try:
        model, data = stored_model_config(path), stored_data_config(path)
    except (CheckpointError, ConfigError):
        return [], None
    keys = {} if "model" in given else {f"model.{key}": value for key, value in asdict(model).items()}
    keys |= {f"data.{key}": getattr(data, key) for key in TOKENIZER_KEYS}
    return [f"{key}={_value(value)}" for key, value in keys.items()], path


def _value(value: Any) -> str:
    """A value as an override writes it: true, null, [a,b], a path quoted where Hydra's grammar needs it."""
    if isinstance(value, str):
        return value if re.fullmatch(r"[\w./+-]+", value) else json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def check_agrees(start: LoadedModel, run: RunConfig, named: str) -> None:
    """The run's model and tokenizer keys must be the checkpoint's, so the weights fit and mean the
    same tokens, and so does its direction; one line per key that differs, each headed ``named``
    (the key and the path)."""
    theirs = {f"model.{key}": value for key, value in asdict(start.model_config).items()}
    ours = {f"model.{key}": value for key, value in asdict(run.model).items()}
    for key in (*TOKENIZER_KEYS, "direction"):
        theirs[f"data.{key}"], ours[f"data.{key}"] = getattr(start.data_config, key), getattr(run.data, key)
    free = {f"model.{key}" for key in FREE_MODEL_KEYS}
    differ = [key for key in theirs if key not in free and theirs[key] != ours[key]]
    if differ:
        raise ConfigError(
            "\n".join(
                f"{named} has {key}={_value(theirs[key])}, this run {key}={_value(ours[key])}: "
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
