"""``ckpt_path``: the checkpoint a run resumes, opened and checked against the run before the run
writes anything, so that a wrong path costs one line and the corrected command finds nothing in
its way."""

from __future__ import annotations

from pathlib import Path

from seq2seq.checkpoint import CheckpointError, load_model
from seq2seq.config import ConfigError, RunConfig
from seq2seq.training.init_from import check_agrees


def check_resumable(run: RunConfig) -> None:
    """Raise a one-line :class:`ConfigError` if ``ckpt_path`` names no file, one that is not a
    readable seq2seq checkpoint (empty, cut short, text), or one of another model or tokenizer."""
    if run.ckpt_path is None:
        return
    if not Path(run.ckpt_path).is_file():
        raise ConfigError(f"ckpt_path: no checkpoint at {run.ckpt_path}")
    try:
        resumed = load_model(run.ckpt_path)  # its weights checked against its own config, too
    except CheckpointError as err:
        raise ConfigError(f"ckpt_path: {err}") from err
    check_agrees(resumed, run, f"ckpt_path: {run.ckpt_path}")
