"""The ``translate.py`` command line's options: the parser, the checks made before a model is
opened, and what the options change of the model's decoding settings (:class:`DecodeOverrides`)."""

from __future__ import annotations

import argparse
import math

from seq2seq.command_line import OneLineParser, UsageError, add_compute_arguments, add_model_arguments
from seq2seq.decoding.overrides import DecodeOverrides
from seq2seq.inference.shortlist import add_shortlist_argument, check_shortlist_argument

PROG = "translate.py"
EXAMPLES = f"""examples:
  python {PROG} --ckpt model.ckpt "How are you?" "I like coffee."
  python {PROG} --ckpt model.ckpt < input.en > output.es        (streams; progress bar on stderr)
  python {PROG} --ckpt model.ckpt --beam 5 --nbest 3 "Good morning."   (index<TAB>score<TAB>text)
  python {PROG} --ckpt model.ckpt --show-attention --attention-png att.png "I like coffee."
  python {PROG} --ckpt model.ckpt --eval test           (BLEU/chrF on the checkpoint corpus's test split)
  python {PROG} --ckpt model.ckpt --eval pairs.tsv      (columns in the training corpus's order)
  python {PROG} --ckpt model.ckpt --interactive
  python {PROG} --model exported/ "How are you?"   (a model exported with python -m seq2seq.export)

Blank input lines give blank output lines; bytes that are not UTF-8 are read as U+FFFD; inputs
longer than the model's max positions are truncated (one warning on stderr). Errors (missing,
corrupt or mismatched checkpoint, no GPU, bad data) print one line on stderr and exit 1; bad
arguments exit 2. With --output, a failed run leaves no file; an existing file keeps its mode,
a symlink is written through, a FIFO or device (/dev/stdout) is written into, and a file without
a write bit is refused. --eval prints its scores before it writes any file.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Translate with a trained seq2seq checkpoint.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "sentences", nargs="*", help="sentences to translate; without any, stdin is read line by line"
    )
    add_model_arguments(
        parser, "CTranslate2 or transformers export written by python -m seq2seq.export", True
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--interactive", "-i", action="store_true", help="prompt for sentences until EOF (Ctrl-D)"
    )
    mode.add_argument(
        "--eval",
        metavar="SPLIT|PATH",
        help="score 'test' or 'valid' (rebuilt from the checkpoint's data config) or a TSV/TSV.gz of pairs "
        "laid out like the training corpus; prints BLEU and chrF with signatures and BLEU per source length",
    )
    search = parser.add_mutually_exclusive_group()
    search.add_argument(
        "--beam",
        type=int,
        metavar="N",
        help="beam size (default: the checkpoint's); more than the target vocabulary's size is refused",
    )
    search.add_argument("--greedy", action="store_true", help="greedy search (beam size 1)")
    search.add_argument("--sample", action="store_true", help="sample each token instead of searching")
    parser.add_argument(
        "--temperature",
        type=float,
        metavar="T",
        help="sampling temperature, finite, >= 0 (with --sample; 0 takes the likeliest token, as --greedy)",
    )
    parser.add_argument(
        "--top-k", type=int, metavar="K", help="sample among the K likeliest tokens (with --sample)"
    )
    parser.add_argument(
        "--top-p",
        type=float,
        metavar="P",
        help="sample among the likeliest tokens that hold probability P, 0 < P <= 1 (with --sample)",
    )
    parser.add_argument("--seed", type=int, metavar="N", help="random seed for --sample")
    parser.add_argument(
        "--nbest", type=int, metavar="K", help="print K hypotheses per input: index<TAB>score<TAB>text"
    )
    parser.add_argument(
        "--max-len", type=int, metavar="T", help="at most T output tokens (default: a*source+b)"
    )
    parser.add_argument(
        "--tsv",
        action="store_true",
        help="input lines are source<TAB>prefix[<TAB>phrase...]: the start each translation continues (may "
        "be empty), then phrases it must contain (with --beam); without it a TAB is part of the text",
    )
    parser.add_argument(
        "--constraints-in-order",
        action="store_true",
        help="with --tsv: each translation holds its phrases in the order given",
    )
    add_compute_arguments(
        parser,
        "compute dtype (default: auto, chosen from the hardware like trainer.precision=auto; int8: int8 "
        "weights in the decoder and output projection, on a CPU)",
    )
    add_shortlist_argument(parser)
    parser.add_argument(
        "--capture",
        action="store_true",
        help="compile the decoder step at fixed shapes, replayed as CUDA graphs on a GPU (decode.capture); "
        "float32 only",
    )
    parser.add_argument(
        "--batch-tokens",
        type=int,
        metavar="N",
        help="padded source tokens per batch (default: the checkpoint's data.eval_max_tokens, as validation)",
    )
    parser.add_argument(
        "--output", "-o", metavar="PATH", help="write translations (or --eval hypotheses) here"
    )
    parser.add_argument(
        "--metrics-out",
        metavar="PATH",
        help="with --eval: also write the scores as JSON (split or file, sentences, beam, compute, BLEU, "
        "chrF, seconds), what python -m tools.docs.results_page record --test-metrics reads",
    )
    parser.add_argument(
        "--show-attention", action="store_true", help="print each sentence's cross-attention table"
    )
    parser.add_argument(
        "--attention-png", metavar="PATH", help="save the heatmap of the (single) sentence's attention"
    )
    return parser


def checked_overrides(args: argparse.Namespace) -> DecodeOverrides:
    """Refuse bad values and combinations before anything is opened; then what the options change of
    the model's decoding settings."""
    for name in ("beam", "nbest", "max_len", "batch_tokens", "top_k"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "top_k" else 1):
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if args.top_p is not None and not 0.0 < args.top_p <= 1.0:
        raise UsageError(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.temperature is not None and not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise UsageError(f"--temperature must be a finite number >= 0 (0: greedy), got {args.temperature}")
    sampling_only = (args.temperature, args.top_k, args.top_p, args.seed)
    if any(value is not None for value in sampling_only) and not args.sample:
        raise UsageError("--temperature, --top-k, --top-p and --seed need --sample")
    visual = args.show_attention or args.attention_png
    if visual and args.model:
        raise UsageError("--show-attention/--attention-png need --ckpt: an exported model shows no attention")
    if visual and len(args.ckpt) > 1:
        raise UsageError("--show-attention/--attention-png need one --ckpt: an ensemble has no one attention")
    if visual and (args.eval or not (args.sentences or args.interactive)):
        raise UsageError(
            "--show-attention/--attention-png need sentences on the command line or --interactive"
        )
    if args.attention_png and len(args.sentences) != 1:
        raise UsageError("--attention-png needs exactly one sentence")
    if args.sentences and (args.eval or args.interactive):
        raise UsageError("sentences cannot be combined with --eval or --interactive")
    if args.capture and args.model:
        raise UsageError("--capture needs --ckpt: an exported model decodes in its own engine")
    if args.metrics_out and not args.eval:
        raise UsageError("--metrics-out needs --eval")
    if args.constraints_in_order and not args.tsv:
        raise UsageError("--constraints-in-order needs --tsv: the phrases come in its columns")
    check_shortlist_argument(args.shortlist, args.ckpt)
    return DecodeOverrides(
        beam=args.beam or (1 if args.greedy else None), nbest=args.nbest or 1, max_len=args.max_len,
        sample=args.sample, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        capture=args.capture,
    )  # fmt: skip
