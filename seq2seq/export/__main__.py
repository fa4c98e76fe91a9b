"""``python -m seq2seq.export --ckpt best.ckpt [--to ctranslate2|transformers] OUT_DIR``.

Expected failures (a missing or foreign checkpoint, an output directory that holds something
else, a model the engine cannot express) print one line on stderr and exit 1; bad arguments
exit 2. A failed export leaves the output directory as it was.
"""

from __future__ import annotations

import argparse
import sys

from seq2seq.checkpoint import CheckpointError
from seq2seq.command_line import OneLineParser, UsageError
from seq2seq.export.bundle import ExportError
from seq2seq.export.to_ctranslate2 import QUANTIZATIONS, export_checkpoint
from seq2seq.export.to_transformers import export_to_transformers

PROG = "python -m seq2seq.export"


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
        choices=["ctranslate2", "transformers"],
        default="ctranslate2",
        help="engine (default: ctranslate2); transformers writes a folder for AutoModelForSeq2SeqLM",
    )
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        help="ctranslate2 weight type (default: int8; float32 reproduces the PyTorch model's tokens)",
    )
    parser.add_argument("--force", action="store_true", help="replace an earlier export in OUT_DIR")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the export; returns the exit code instead of raising (tests call this in-process)."""
    try:
        args = build_parser().parse_args(argv)
        if args.to == "transformers":
            if args.quantization:
                raise UsageError("--quantization is for --to ctranslate2; transformers gets float32 weights")
            args.quantization = "float32"
            out_dir = export_to_transformers(args.ckpt, args.out_dir, args.force)
        else:
            args.quantization = args.quantization or "int8"
            out_dir = export_checkpoint(args.ckpt, args.out_dir, args.quantization, args.force)
    except UsageError as err:
        print(f"{PROG}: error: {err} (see --help)", file=sys.stderr)
        return 2
    except (CheckpointError, ExportError, OSError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    print(f"exported {args.ckpt} to {out_dir} ({args.to}, {args.quantization})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
