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
from pathlib import Path
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
from seq2seq.inference.evaluation import evaluate, format_scores, read_eval_pairs
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
    if args.interactive:
        with output(None) as out:
            _interactive(translator, args, out)
        return 0
    if args.eval:
        sources, references = _eval_set(args.eval, facts.data_config)
        started = time.perf_counter()
        evaluation = evaluate(translator, sources, references)
        metrics = _metrics(args.eval, translator, reason, evaluation.scores, time.perf_counter() - started)
        scores = format_scores(evaluation.scores) + f"\ncompute = {translator.compute} ({reason})\n"
        with output(None) as out:  # first: a file that fails to write must not take the scores with it
            out.write(scores)
            out.flush()
        if args.output:
            with output(args.output) as out:
                out.writelines(text + "\n" for text in evaluation.hypotheses)
        if args.metrics_out:
            with output(args.metrics_out, "--metrics-out") as out:
                json.dump(metrics, out, indent=1)
        return 0
    with output(args.output) as out:
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
