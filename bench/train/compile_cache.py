"""The captured step's compile, paid once per machine: a first process against a second one.

Two fresh processes in turn train one step of each of the GPU recipe's batch shapes (its
``data.shape_rungs`` and ``data.max_tokens``) through the captured step (``compile=true`` with
``data.static_shapes=true``, inductor) of the ``tiny`` model, with the compile cache in a new
scratch folder: the first compiles each shape and fills the cache, the second loads it. A shape's
seconds are its first step's; the ratio is the second process's sum over the first's. ``--shapes N``
keeps the ladder's first N shapes, where compiling them all would take too long (a loaded CPU).

    python -m bench.train.compile_cache [--device cpu|cuda] [--model tiny] [--shapes N] [--record PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from bench.lib.measure import (
    add_target_option,
    model_config,
    print_ratios,
    table_record,
    targets,
    write_record,
)
from bench.lib.training_step import captured_loss, train_step_fn
from seq2seq.config import DataConfig
from seq2seq.data.batching import Batch
from seq2seq.data.static_shapes import StaticShapes
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID
from seq2seq.machine.hardware import describe
from seq2seq.model import Transformer
from seq2seq.training.captured_step import CapturedStep

TARGETS = {"compile_second_over_first": 0.1}  # a later run compiles in at most a tenth of the first's time
RECIPE = Path(__file__).resolve().parents[2] / "configs" / "experiment" / "spa_en_gpu.yaml"
VOCAB = 8000  # the recipe's vocabulary size: the generator's shape


def recipe_shapes() -> StaticShapes:
    """The GPU recipe's batch shapes: its ladder at its token budget, pairs up to the default length."""
    data = OmegaConf.load(RECIPE).data
    return StaticShapes.of(DataConfig.max_length, int(data.max_tokens), rungs=tuple(data.shape_rungs))


def _batch(rows: int, rung: int, device: torch.device) -> Batch:
    """A full batch of random pairs of ``rung`` tokens: (rows, rung) ids on ``device``."""
    ids = torch.randint(4, VOCAB, (rows, rung), generator=torch.Generator().manual_seed(rung))
    src = torch.cat([ids[:, 1:], torch.full((rows, 1), EOS_ID)], 1)
    tgt_in = torch.cat([torch.full((rows, 1), BOS_ID), ids[:, 1:]], 1)
    return Batch.of(src.to(device), tgt_in.to(device), src.to(device))


def compile_seconds(
    root: Path, device: torch.device, model: str, count: int | None
) -> list[tuple[str, float]]:
    """The first training step of each of the ladder's first ``count`` shapes (None: all), in
    seconds, through a captured step caching under ``root``."""
    torch.manual_seed(0)
    net = Transformer(model_config(model), VOCAB, VOCAB).to(device)
    shapes = recipe_shapes()
    step = CapturedStep(net, 0.1, cache_root=root)
    train = train_step_fn(net, captured_loss(step), torch.float32)
    seconds = []
    for rung in shapes.rungs[:count]:
        rows, _ = shapes.shape(rung)
        batch = _batch(rows, rung, device)
        start = time.perf_counter()
        train(batch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append((f"{rows} x {rung}", time.perf_counter() - start))
    return seconds


def _process(root: Path, args: argparse.Namespace) -> list[tuple[str, float]]:
    """:func:`compile_seconds` in a fresh Python process: nothing compiled in memory beforehand."""
    command = [sys.executable, "-m", "bench.train.compile_cache", "--child", str(root)]
    command += ["--device", args.device, "--model", args.model]
    command += [] if args.shapes is None else ["--shapes", str(args.shapes)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return [tuple(pair) for pair in json.loads(done.stdout.splitlines()[-1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--model", default="tiny", help="configs/model/ size of the compiled model")
    parser.add_argument("--shapes", type=int, help="the ladder's first N shapes only (default: all)")
    parser.add_argument("--record", type=Path, help="write the table record here")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one process's measurement
    add_target_option(parser, TARGETS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(compile_seconds(args.child, torch.device(args.device), args.model, args.shapes)))
        return
    machine = describe()
    print(machine)
    with tempfile.TemporaryDirectory() as scratch:
        first, second = _process(Path(scratch), args), _process(Path(scratch), args)
    header = [f"batch shape (model {args.model}, {args.device})", "first process s", "second process s"]
    rows = [[shape, f"{a:.1f}", f"{b:.1f}"] for (shape, a), (_, b) in zip(first, second, strict=True)]
    total_first, total_second = sum(s for _, s in first), sum(s for _, s in second)
    rows.append(["all shapes", f"{total_first:.1f}", f"{total_second:.1f}"])
    for row in [header, *rows]:
        print(" | ".join(row))
    ratios = {"compile_second_over_first": total_second / total_first}
    goals = targets(args)
    print_ratios(ratios.items(), goals, digits=3)
    if args.record:
        notes = (
            f"python -m bench.train.compile_cache --device {args.device} --model {args.model}"
            + ("" if args.shapes is None else f" --shapes {args.shapes}")
            + ": one training step of each of the GPU recipe's batch shapes (or its first N) through the "
            "captured step (inductor), in two fresh processes sharing a new compile cache; a shape's "
            "seconds are its first step's"
        )
        write_record(args.record, table_record(args.record.stem, machine, notes, header, rows, ratios))


if __name__ == "__main__":
    main()
