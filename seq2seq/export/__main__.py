"""``python -m seq2seq.export --ckpt best.ckpt [--to ctranslate2|transformers] OUT_DIR``.

Expected failures (a missing or foreign checkpoint, an output directory that holds something
else, a model the engine cannot express) print one line on stderr and exit 1; bad arguments
exit 2. A failed export leaves the output directory as it was.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from seq2seq.command_line import OneLineParser, UsageError, run_command
from seq2seq.export.to_ctranslate2 import QUANTIZATIONS, export_checkpoint
from seq2seq.export.to_transformers import export_to_transformers
from seq2seq.formats.checkpoint import CheckpointError
from seq2seq.formats.export_folder import CTRANSLATE2, TRANSFORMERS, ExportError

PROG = "python -m seq2seq.export"


@dataclass(frozen=True)
class Exporter:
    """How ``--to`` writes one engine's folder."""

    write: Callable[[str, str, str, bool], Path]  # (checkpoint, out_dir, weight type, force) -> out_dir
    weight_types: tuple[str, ...]  # what --quantization may choose, the default first; one: no choice


# --to name (an engine of seq2seq.formats.export_folder.ENGINES) -> its exporter
EXPORTERS = {
    CTRANSLATE2: Exporter(export_checkpoint, QUANTIZATIONS),
    TRANSFORMERS: Exporter(
        lambda checkpoint, out_dir, _, force: export_to_transformers(checkpoint, out_dir, force), ("float32",)
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Export a trained seq2seq checkpoint to an inference engine, with its tokenizer. "
        "Translate with the result: python translate.py --model OUT_DIR ...",
    )
    parser.add_argument(
        "out_dir", metavar="OUT_DIR", help="directory to write (new, empty, or an export with --force)"
    )
    parser.add_argument("--ckpt", required=True, metavar="PATH", help="checkpoint written by train.py")
    parser.add_argument(
        "--to",
        choices=list(EXPORTERS),
        default=CTRANSLATE2,
        help="engine (default: ctranslate2); transformers writes a folder for AutoModelForSeq2SeqLM",
    )
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        help="ctranslate2 weight type (default: int8; float32 reproduces the PyTorch model's tokens)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier export in OUT_DIR; files the export did not write (notes, say) stay",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    exporter = EXPORTERS[args.to]
    if args.quantization and len(exporter.weight_types) == 1:
        choosers = " or ".join(name for name, other in EXPORTERS.items() if len(other.weight_types) > 1)
        raise UsageError(
            f"--quantization is for --to {choosers}; {args.to} gets {exporter.weight_types[0]} weights"
        )
    quantization = args.quantization or exporter.weight_types[0]
    out_dir = exporter.write(args.ckpt, args.out_dir, quantization, args.force)
    print(f"exported {args.ckpt} to {out_dir} ({args.to}, {quantization})", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the export; returns the exit code instead of raising (tests call this in-process)."""
    return run_command(
        PROG, lambda: run(build_parser().parse_args(argv)), (CheckpointError, ExportError, OSError)
    )


if __name__ == "__main__":
    sys.exit(main())
