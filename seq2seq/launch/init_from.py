"""``init_from``'s model and tokenizer keys, given to the composition so that a run started from a
checkpoint gets its model whatever model group the recipe picks."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from seq2seq.config import ConfigError
from seq2seq.formats.checkpoint import CheckpointError, stored_configs
from seq2seq.training.starting_point import TOKENIZER_KEYS, override_text


def model_overrides(overrides: list[str]) -> tuple[list[str], str | None]:
    """The overrides that give a run started ``init_from=CKPT`` its checkpoint's model, whatever model
    group the recipe picks (unless the command line picks one itself), and the keys that made its
    tokenizer, which the run keeps; and the checkpoint's path. None where the command line names no
    readable checkpoint (:func:`~seq2seq.training.starting_point.open_start` then says why). Placed
    before the command line's own overrides, which win: ``model.dropout=0.2`` still applies, and a
    tokenizer key set to another value is :func:`~seq2seq.training.starting_point.check_agrees`'s error."""
    given = {arg.lstrip("+").split("=", 1)[0]: arg.split("=", 1)[1] for arg in overrides if "=" in arg}
    path = given.get("init_from")
    if path is None or not Path(path).is_file():
        return [], None
    try:
        model, data = stored_configs(path)
    except (CheckpointError, ConfigError):
        return [], None
    keys = {} if "model" in given else {f"model.{key}": value for key, value in asdict(model).items()}
    keys |= {f"data.{key}": getattr(data, key) for key in TOKENIZER_KEYS}
    return [f"{key}={override_text(value)}" for key, value in keys.items()], path
