"""Command line behind ``translate.py``: argparse, modes and error handling around a translator.

Expected failures (missing or corrupt checkpoint, no GPU, bad arguments, bad data, output that
cannot be written) raise their own exception types where they arise; :func:`main` prints those
as one line on stderr and returns a non-zero code, and lets anything else (a bug) raise.
``--output`` is written to a temporary file that is renamed only on success, so a failure never
leaves a partial file behind; the file keeps its mode, and a symlink keeps pointing at it. A FIFO
or a device (``/dev/stdout``) is written into, and a file without a write bit is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import math
import os
import secrets
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from seq2seq.command_line import (
    OneLineParser,
    UsageError,
    add_compute_arguments,
    add_model_arguments,
    run_command,
)
from seq2seq.config import ConfigError, DataConfig, DataError, DecodeConfig
from seq2seq.decoding.captured_steps import capture_refusal
from seq2seq.decoding.shortlist import ShortlistError
from seq2seq.formats.checkpoint import CheckpointError
from seq2seq.formats.export_folder import ExportError
from seq2seq.inference.alignment import AlignmentError, align, format_table, save_heatmap
from seq2seq.inference.backends import EnsembleError, open_model
from seq2seq.inference.evaluation import evaluate, format_scores, read_eval_pairs
from seq2seq.inference.shortlist import add_shortlist_argument, check_shortlist_argument, shortlist_of
from seq2seq.inference.translator import TargetError, Translation, Translator, TranslatorBase
from seq2seq.machine.hardware import AUTO, DeviceError, compile_blocker

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


class OutputError(Exception):
    """The output (stdout, ``--output`` or ``--attention-png``) cannot be written."""


EXPECTED_ERRORS = (
    CheckpointError, ConfigError, DataError, DeviceError, AlignmentError, OutputError, ExportError,
    ShortlistError,
)  # fmt: skip


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


def _check(args: argparse.Namespace) -> None:
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
    check_shortlist_argument(args)


def _check_capture(translator: Translator) -> None:
    """``--capture``'s needs, before the first sentence: a model the captured step decodes as the
    eager search does, and what ``compile=true`` needs on this device."""
    if reason := capture_refusal(translator.model, translator.shortlist is not None):
        raise UsageError(reason)
    if blocker := compile_blocker(translator.device.type):
        raise UsageError(f"--capture compiles the decoder step: {blocker}")


def decode_cfg_from_args(cfg: DecodeConfig, args: argparse.Namespace) -> DecodeConfig:
    """The checkpoint's decoding config with the command-line overrides applied."""
    beam = args.beam or (1 if args.greedy or args.sample else None)
    overridden = replace(
        cfg.overridden(beam, args.nbest or 1, args.max_len), capture=cfg.capture or args.capture
    )
    if not args.sample or args.temperature == 0:  # the limit of sampling as T -> 0: the likeliest token
        return overridden
    temperature = 1.0 if args.temperature is None else args.temperature
    sampling = {"temperature": temperature, "top_k": args.top_k or 0, "top_p": args.top_p or 1.0}
    return replace(overridden, sampling=True, **sampling)


def _existing_mode(path: str) -> int | None:
    """The mode of the file ``path`` names, through any symlink (``/dev/stdout`` names a pipe), or
    None if there is none yet."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None


def _check_writable(option: str, path: str | None) -> None:
    """Refuse an output that cannot be written before decoding, not after minutes of it. A file
    without any write bit is refused even where root could replace it: someone made it read-only."""
    if path is None:
        return
    try:
        mode = _existing_mode(path)
    except OSError as err:
        raise OutputError(f"cannot write {option} {path}: {err.strerror}") from err
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"cannot write {option} {path}: it is a directory")
    if mode is not None and not stat.S_ISREG(mode):  # a FIFO, a device, /dev/stdout: written into
        return
    if mode is not None and not (mode & 0o222 and os.access(path, os.W_OK)):
        raise OutputError(
            f"cannot write {option} {path}: the file is read-only (mode {stat.S_IMODE(mode):o})"
        )
    target = Path(path).resolve()
    if not target.parent.is_dir():
        raise OutputError(f"cannot write {option} {path}: its directory {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK):
        raise OutputError(f"cannot write {option} {path}: no permission to create files in {target.parent}")


@contextlib.contextmanager
def _output(path: str | None, option: str = "--output") -> Iterator[TextIO]:
    """stdout; ``path`` itself when it names a FIFO or a device (``/dev/stdout``, ``/dev/null``),
    which are streams to write into, not files to replace; else a temporary file renamed onto
    ``path`` only if the block succeeds.

    The file replaced is the one ``path`` names through any symlink, and keeps its mode; a new one
    gets the umask's. An OSError while the output is open (creating, writing or renaming it) is an
    :class:`OutputError`.
    """
    try:
        if path is None:
            yield sys.stdout
            return
        mode = _existing_mode(path)
        if mode is not None and not stat.S_ISREG(mode):
            with open(path, "w", encoding="utf-8") as stream:
                yield stream
            return
        target = Path(path).resolve()  # a symlink stays, and the file it points at is replaced
        temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 less the umask
        if mode is not None:
            os.fchmod(fd, stat.S_IMODE(mode))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                yield handle
            os.replace(temp, target)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
    except BrokenPipeError:  # the reader left; main stops quietly
        raise
    except OSError as err:  # named as the user gave it: the temporary file is ours
        raise OutputError(f"cannot write {option} {path or 'stdout'}: {err.strerror or err}") from err


def _write(out: TextIO, index: int, translations: list[Translation], with_scores: bool) -> None:
    if not with_scores:
        out.write(translations[0].text + "\n")
        return
    for translation in translations:
        out.write(f"{index}\t{translation.score:.4f}\t{translation.text}\n")


def _stdin_is_file() -> bool:
    try:
        return stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)
    except (OSError, ValueError):  # replaced or closed stdin (e.g. under a test runner)
        return False


def _eval_set(spec: str, data_cfg: DataConfig) -> tuple[list[str], list[list[str]]]:
    """Sources and references of ``--eval``: a split rebuilt from the data config, or a TSV of pairs."""
    split = spec in ("test", "valid")
    if not split and not Path(spec).is_file():
        raise DataError(f"--eval {spec}: not 'test', 'valid' or an existing file")
    try:
        if split:
            from seq2seq.data import corpus
            from seq2seq.data.streamed import build  # datasets: seconds to import, only needed here

            # the same grouped split training validated on
            if data_cfg.streaming:
                return corpus.references(build.held_out_text(data_cfg)[spec])
            return corpus.references(corpus.held_out_split(data_cfg, spec))
        columns = list(data_cfg.columns)
        return read_eval_pairs(spec, columns.index(data_cfg.source_lang), columns.index(data_cfg.target_lang))
    except OSError as err:  # the file, the corpus or its cache cannot be opened or written
        raise DataError(str(err)) from err


def _translate_lines(
    translator: TranslatorBase,
    lines: Iterable[str],
    with_scores: bool,
    out: TextIO,
    progress: bool = False,
    tsv: bool = False,
    in_order: bool = False,
) -> None:
    """Each line's translation. With ``tsv``, tab-separated columns after the source: the start its
    translation continues, then phrases it must contain (in that order with ``in_order``); else a TAB
    is part of the text."""
    if tsv:
        columns = (line.rstrip("\r\n").split("\t") for line in lines)
        sources, prefixes, phrases = itertools.tee(columns, 3)  # consumed in step
        results = translator.translate(
            (c[0] for c in sources), prefixes=(c[1] if len(c) > 1 else "" for c in prefixes),
            constraints=(c[2:] for c in phrases), constraints_in_order=in_order,
        )  # fmt: skip
    else:
        results = translator.translate(lines)
    for index, translations in enumerate(tqdm(results, unit=" lines", file=sys.stderr, disable=not progress)):
        _write(out, index, translations, with_scores)
    out.flush()


def _show_attention(translator: Translator, sentence: str, args: argparse.Namespace, out: TextIO) -> None:
    alignment = align(translator, sentence)
    if args.show_attention:
        out.write(format_table(alignment) + "\n")
    if args.attention_png:
        save_heatmap(alignment, args.attention_png)


def _interactive(translator: TranslatorBase, args: argparse.Namespace, out: TextIO) -> None:
    prompt = "> " if sys.stdin.isatty() else ""  # piped input gets clean output
    while True:
        try:
            line = input(prompt)
        except EOFError:
            return
        _translate_lines(
            translator, [line], args.nbest is not None, out, tsv=args.tsv, in_order=args.constraints_in_order
        )
        if line.strip() and args.show_attention:
            _show_attention(translator, line, args, out)


def _metrics(spec: str, translator: TranslatorBase, reason: str, scores: dict, seconds: float) -> dict:
    """What ``--metrics-out`` writes: one evaluation, with the numerics it ran in."""
    cfg = translator.decode_cfg
    return {
        "eval": spec,
        "sentences": scores["count"],
        "beam": cfg.beam_size,
        "sampling": cfg.sampling,
        "compute": translator.compute,
        "compute_reason": reason,
        "bleu": round(scores["bleu"], 2),
        "chrf": round(scores["chrf"], 2),
        "bleu_signature": scores["bleu_signature"],
        "chrf_signature": scores["chrf_signature"],
        "seconds": round(seconds, 1),
    }


def run(args: argparse.Namespace) -> int:
    """Run the parsed command; checkpoints that cannot form an ensemble, or a target prefix the search
    cannot honour, are bad arguments (exit 2)."""
    try:
        return _run(args)
    except (EnsembleError, TargetError) as err:
        raise UsageError(str(err)) from err


def _run(args: argparse.Namespace) -> int:
    _check(args)
    _check_writable("--output", args.output)
    _check_writable("--metrics-out", args.metrics_out)
    if isinstance(sys.stdin, io.TextIOWrapper):  # bytes that are not UTF-8 become U+FFFD, not a crash
        sys.stdin.reconfigure(errors="replace")
    dtype = "float32" if args.capture and args.dtype == AUTO else args.dtype  # the captured step's only one
    translator, facts, reason = open_model(args.ckpt, args.model, args.device, args.batch_tokens, dtype)
    vocabulary = facts.tokenizer.tgt_vocab_size
    if args.beam is not None and args.beam > vocabulary:  # a beam cannot hold more prefixes than tokens
        raise UsageError(f"--beam {args.beam} is more than the target vocabulary's {vocabulary} tokens")
    translator.decode_cfg = decode_cfg_from_args(translator.decode_cfg, args)
    if args.shortlist is not None:  # only a checkpoint's Translator takes one
        translator.shortlist = shortlist_of(args, facts.tokenizer)
    if args.seed is not None:
        translator.seed(args.seed)
    if args.capture:
        _check_capture(translator)
    if args.interactive:
        with _output(None) as out:
            _interactive(translator, args, out)
        return 0
    if args.eval:
        sources, references = _eval_set(args.eval, facts.data_config)
        started = time.perf_counter()
        evaluation = evaluate(translator, sources, references)
        seconds = time.perf_counter() - started
        with _output(None) as out:  # first: a file that fails to write must not take the scores with it
            out.write(format_scores(evaluation.scores) + f"\ncompute = {translator.compute} ({reason})\n")
            out.flush()
        if args.output:
            with _output(args.output) as out:
                out.writelines(text + "\n" for text in evaluation.hypotheses)
        if args.metrics_out:
            with _output(args.metrics_out, "--metrics-out") as out:
                json.dump(_metrics(args.eval, translator, reason, evaluation.scores, seconds), out, indent=1)
        return 0
    with _output(args.output) as out:
        progress = not args.sentences and _stdin_is_file()  # a pipe or a terminal gets no bar
        _translate_lines(
            translator,
            args.sentences or sys.stdin,
            args.nbest is not None,
            out,
            progress,
            args.tsv,
            args.constraints_in_order,
        )
        for sentence in args.sentences if (args.show_attention or args.attention_png) else []:
            _show_attention(translator, sentence, args, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code instead of raising (tests call this in-process)."""
    return run_command(PROG, lambda: run(build_parser().parse_args(argv)), EXPECTED_ERRORS)
