"""Command line behind ``translate.py``: its modes and error handling around a translator opened
whole (:func:`~seq2seq.inference.backends.open_model`); the options are :mod:`.cli_options`'.

Expected failures (missing or corrupt checkpoint, no GPU, bad arguments, bad data, output that
cannot be written) raise their own exception types where they arise; :func:`main` prints those
as one line on stderr and returns a non-zero code, and lets anything else (a bug) raise.
``--output`` and ``--metrics-out`` are written whole (:mod:`seq2seq.formats.output_file`).
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import stat
import sys
import time
from collections.abc import Iterable
from typing import TextIO

from tqdm import tqdm

from seq2seq.command_line import UsageError, run_command
from seq2seq.config import ConfigError, DataConfig, DataError
from seq2seq.decoding.captured_steps import capture_refusal
from seq2seq.decoding.shortlist import ShortlistError
from seq2seq.formats.checkpoint import CheckpointError
from seq2seq.formats.export_folder import ExportError
from seq2seq.formats.output_file import OutputError, check_writable, output
from seq2seq.inference.alignment import AlignmentError, align, format_table, save_heatmap
from seq2seq.inference.backends import EnsembleError, open_model
from seq2seq.inference.cli_options import PROG, build_parser, checked_overrides
from seq2seq.inference.evaluation import eval_set, evaluate, format_scores, metrics_record
from seq2seq.inference.targets import TargetError
from seq2seq.inference.translator import Translation, Translator, TranslatorBase
from seq2seq.machine.hardware import DeviceError, compile_blocker

EXPECTED_ERRORS = (
    CheckpointError, ConfigError, DataError, DeviceError, AlignmentError, OutputError, ExportError,
    ShortlistError,
)  # fmt: skip


def _check_capture(translator: Translator) -> None:
    """``--capture``'s needs, before the first sentence: a model the captured step decodes as the
    eager search does, and what ``compile=true`` needs on this device."""
    if reason := capture_refusal(translator.model, translator.shortlist is not None):
        raise UsageError(reason)
    if blocker := compile_blocker(translator.device.type):
        raise UsageError(f"--capture compiles the decoder step: {blocker}")


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


def _show_attention(translator: Translator, sentence: str, table: bool, png: str | None, out: TextIO) -> None:
    """``--show-attention``'s table on ``out`` and ``--attention-png``'s heatmap of one sentence."""
    alignment = align(translator, sentence)
    if table:
        out.write(format_table(alignment) + "\n")
    if png:
        save_heatmap(alignment, png)


def _interactive(
    translator: TranslatorBase, out: TextIO, with_scores: bool, tsv: bool, in_order: bool, table: bool
) -> None:
    """Each line read from the prompt, translated at once (with its attention table when ``table``)."""
    prompt = "> " if sys.stdin.isatty() else ""  # piped input gets clean output
    while True:
        try:
            line = input(prompt)
        except EOFError:
            return
        _translate_lines(translator, [line], with_scores, out, tsv=tsv, in_order=in_order)
        if line.strip() and table:
            _show_attention(translator, line, True, None, out)


def _evaluate(
    translator: TranslatorBase,
    reason: str,
    spec: str,
    data_cfg: DataConfig,
    hypotheses_path: str | None,
    metrics_path: str | None,
) -> None:
    """``--eval``: the scores on stdout first (a file that fails to write must not take them with it),
    then the hypotheses to ``--output`` and the record to ``--metrics-out``."""
    sources, references = eval_set(spec, data_cfg)
    started = time.perf_counter()
    evaluation = evaluate(translator, sources, references)
    record = metrics_record(spec, translator, reason, evaluation.scores, time.perf_counter() - started)
    with output(None) as out:
        out.write(format_scores(evaluation.scores) + f"\ncompute = {translator.compute} ({reason})\n")
        out.flush()
    if hypotheses_path:
        with output(hypotheses_path) as out:
            out.writelines(text + "\n" for text in evaluation.hypotheses)
    if metrics_path:
        with output(metrics_path, "--metrics-out") as out:
            json.dump(record, out, indent=1)


def run(args: argparse.Namespace) -> int:
    """Run the parsed command; checkpoints that cannot form an ensemble, or a target prefix the search
    cannot honour, are bad arguments (exit 2)."""
    try:
        return _run(args)
    except (EnsembleError, TargetError) as err:
        raise UsageError(str(err)) from err


def _run(args: argparse.Namespace) -> int:
    overrides = checked_overrides(args)
    check_writable("--output", args.output)
    check_writable("--metrics-out", args.metrics_out)
    if isinstance(sys.stdin, io.TextIOWrapper):  # bytes that are not UTF-8 become U+FFFD, not a crash
        sys.stdin.reconfigure(errors="replace")
    translator, facts, reason = open_model(
        args.ckpt, args.model, args.device, args.batch_tokens, args.dtype,
        decode=overrides, shortlist=args.shortlist, seed=args.seed,
    )  # fmt: skip
    vocabulary = facts.tokenizer.tgt_vocab_size
    if args.beam is not None and args.beam > vocabulary:  # a beam cannot hold more prefixes than tokens
        raise UsageError(f"--beam {args.beam} is more than the target vocabulary's {vocabulary} tokens")
    if args.capture:
        _check_capture(translator)
    with_scores = args.nbest is not None
    if args.interactive:
        with output(None) as out:
            _interactive(
                translator, out, with_scores, args.tsv, args.constraints_in_order, args.show_attention
            )
        return 0
    if args.eval:
        _evaluate(translator, reason, args.eval, facts.data_config, args.output, args.metrics_out)
        return 0
    with output(args.output) as out:
        progress = not args.sentences and _stdin_is_file()  # a pipe or a terminal gets no bar
        lines = args.sentences or sys.stdin
        _translate_lines(translator, lines, with_scores, out, progress, args.tsv, args.constraints_in_order)
        for sentence in args.sentences if (args.show_attention or args.attention_png) else []:
            _show_attention(translator, sentence, args.show_attention, args.attention_png, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code instead of raising (tests call this in-process)."""
    return run_command(PROG, lambda: run(build_parser().parse_args(argv)), EXPECTED_ERRORS)
