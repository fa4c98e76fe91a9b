"""``python -m seq2seq.training.average CKPT... --output avg.ckpt``: the mean of checkpoints' weights, written
as a weights-only checkpoint that every command opens (translate.py, serve.py, the export, ``init_from``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from seq2seq.command_line import OneLineParser, UsageError, run_command
from seq2seq.config import ModelConfig
from seq2seq.formats.checkpoint import KEY, CheckpointError, read_checkpoint, save_atomically, weights
from seq2seq.training.module import MODEL_PREFIX

PROG = "python -m seq2seq.training.average"


def _model(path: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """The model config with this version's defaults filled in, so an older entry compares equal."""
    try:
        return asdict(ModelConfig(**meta["model_config"]))
    except Exception as err:  # another version's or a hand-edited entry
        raise CheckpointError(f"{path}: unusable seq2seq entry ({type(err).__name__}: {err})") from err


def _refusal(
    path: Path, meta: dict[str, Any], first: Path, first_meta: dict[str, Any], raw: bool
) -> str | None:
    """Why ``path`` cannot be averaged with ``first``, or None."""
    ours, theirs = _model(path, meta), _model(first, first_meta)
    differ = [f"{key} {ours[key]} vs {theirs[key]}" for key in ours if ours[key] != theirs[key]]
    if differ:
        return f"{path} and {first} do not share a model config ({', '.join(differ)})"
    if meta.get("tokenizer") != first_meta.get("tokenizer"):
        return f"{path} and {first} do not share a tokenizer"
    if not raw and meta["weights_prefix"] != first_meta["weights_prefix"]:
        return f"{path} and {first} ship different weights (one its moving average): pass --raw"
    return None


def average(paths: list[Path], raw: bool = False) -> dict[str, Any]:
    """The checkpoint of the mean weights of ``paths`` (their trained weights with ``raw``), read one
    at a time and summed in float64; each must share the first one's model config and tokenizer."""
    first = read_checkpoint(paths[0])
    prefix = MODEL_PREFIX if raw else None  # None: the weights each ships
    dtypes = {name: tensor.dtype for name, tensor in weights(first, prefix).items()}
    total = {name: tensor.double() for name, tensor in weights(first, prefix).items()}
    newest = first
    for path in paths[1:]:
        checkpoint = read_checkpoint(path)
        why = _refusal(path, checkpoint[KEY], paths[0], first[KEY], raw)
        if why:
            raise CheckpointError(why)
        for name, tensor in weights(checkpoint, prefix).items():
            total[name] += tensor.double()  # the same names and shapes: the same model config
        if checkpoint.get("global_step", 0) >= newest.get("global_step", 0):
            newest = checkpoint
    state = {MODEL_PREFIX + name: (tensor / len(paths)).to(dtypes[name]) for name, tensor in total.items()}
    meta = {key: value for key, value in newest[KEY].items() if key != "best_bleu"}
    meta["weights_prefix"] = MODEL_PREFIX
    return {"state_dict": state, KEY: meta, "global_step": newest.get("global_step")}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Average the weights of checkpoints of one model (say the step-*.ckpt that "
        "callbacks.keep_last keeps) into one checkpoint that every command opens.",
    )
    parser.add_argument(
        "checkpoints",
        nargs="+",
        metavar="CKPT",
        help="checkpoints written by train.py; one gives its weights alone (with --raw: its trained weights)",
    )
    parser.add_argument("--output", required=True, metavar="PATH", help="checkpoint to write")
    parser.add_argument(
        "--raw",
        action="store_true",
        help="average the trained weights, not the moving average the checkpoints ship (translate.py's)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing file at --output")
    return parser


def run(args: argparse.Namespace) -> int:
    paths = [Path(path) for path in args.checkpoints]
    output = Path(args.output)
    if output.exists() and not args.force:
        raise UsageError(f"{output} exists; pass --force to replace it")
    save_atomically(average(paths, args.raw), output)
    which = "trained weights" if args.raw else "shipped weights (the moving average where kept)"
    print(f"averaged {len(paths)} checkpoints' {which} into {output}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the averaging; returns the exit code instead of raising (tests call this in-process)."""
    return run_command(PROG, lambda: run(build_parser().parse_args(argv)), (CheckpointError, OSError))


if __name__ == "__main__":
    sys.exit(main())
