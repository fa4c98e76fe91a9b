"""Terminology constraints on the test split: the speed of constrained beam search against plain
beam search, and the share of glossary terms present and the BLEU without and with constraints.

The glossary holds one term per test sentence: the longest word of its reference (at least
``--min-chars`` letters, a content word as a glossary's terms are), kept where the source is not
blank. Both searches decode the same sentences with the checkpoint's beam settings (``--beam``) in
float32, repetitions interleaved, medians of ``--reps``.

    python -m bench.decode.constraints --ckpt runs/<date>/checkpoints/best.ckpt [--limit 500] [--record NAME]

``--record NAME`` writes the table and the ratios to docs/records/NAME.json.
"""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path

from bench.lib.measure import (
    RECORDS,
    bench_parser,
    held_out_test,
    machine,
    print_ratios,
    table_record,
    targets,
    write_record,
)
from seq2seq.data.tokenizers.tokenizer import UNK_ID
from seq2seq.inference.backends import open_model
from seq2seq.inference.evaluation import score
from seq2seq.inference.translator import TranslatorBase
from seq2seq.machine.hardware import describe

TARGETS = {
    "constrained_vs_plain_speed": 0.5,  # constrained search at least half plain beam search's speed
    "constrained_terms_present": 1.0,  # every term in every output
    "constrained_bleu_gain": 0,  # terms from the references do not lower BLEU
}
WORD = re.compile(r"\w+")


def glossary(
    sources: list[str], references: list[list[str]], min_chars: int
) -> list[tuple[str, list[str], str]]:
    """(source, references, term) per test sentence with a term: its first reference's longest word."""
    entries = []
    for source, refs in zip(sources, references, strict=True):
        words = [w for w in WORD.findall(refs[0]) if len(w) >= min_chars and not w.isdigit()]
        if source.strip() and words:
            entries.append((source, refs, max(words, key=len)))
    return entries


def decode(
    translator: TranslatorBase, sources: list[str], terms: list[str] | None
) -> tuple[list[str], float]:
    """The best translation of each source (under its term when ``terms``) and the seconds it took."""
    constraints = None if terms is None else [[term] for term in terms]
    start = time.perf_counter()
    outputs = [best.text for best, *_ in translator.translate(sources, constraints=constraints)]
    return outputs, time.perf_counter() - start


def bench_constraints(
    ckpt: Path, beam: int | None, limit: int | None, reps: int, min_chars: int
) -> tuple[list[list[str]], str, dict[str, float]]:
    """Each search's row (seconds, share of terms present, BLEU), printed, what was decoded, and the
    ratios."""
    translator = open_model(ckpt, device="cpu", dtype="float32").translator
    translator.decode_cfg = translator.decode_cfg_with(beam=max(beam or translator.decode_cfg.beam_size, 2))
    entries = glossary(*held_out_test(ckpt), min_chars)
    spelled = translator.tokenizer.encode_target([term for *_, term in entries])
    entries = [entry for entry, ids in zip(entries, spelled, strict=True) if UNK_ID not in ids][:limit]
    sources, references, terms = (list(column) for column in zip(*entries, strict=True))
    seconds: dict[str, list[float]] = {"plain": [], "constrained": []}
    outputs: dict[str, list[str]] = {}
    for _ in range(reps):
        for name, wanted in (("plain", None), ("constrained", terms)):
            outputs[name], taken = decode(translator, sources, wanted)
            seconds[name].append(taken)
    figures, rows = {}, []
    for name, texts in outputs.items():
        present = sum(term in text for term, text in zip(terms, texts, strict=True)) / len(terms)
        bleu = score(texts, [list(refs) for refs in references])["bleu"]
        median = statistics.median(seconds[name])
        figures[name] = (median, present, bleu)
        rows.append([name, f"{median:.2f}", f"{present:.1%}", f"{bleu:.2f}"])
        print(f"{name:12} {median:.2f} s  terms present {present:.1%}  BLEU {bleu:.2f}")
    decoded = f"{len(terms)} test sentences, beam {translator.decode_cfg.beam_size}, one term each, float32"
    print(decoded)
    (plain_s, _, plain_bleu), (constrained_s, present, bleu) = figures["plain"], figures["constrained"]
    return (
        rows,
        decoded,
        {
            "constrained_vs_plain_speed": plain_s / constrained_s,
            "constrained_terms_present": present,
            "constrained_bleu_gain": bleu - plain_bleu,
        },
    )


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    parser.add_argument(
        "--ckpt", type=Path, required=True, help="the trained checkpoint whose test split is decoded"
    )
    parser.add_argument("--beam", type=int, help="beam size (default: the checkpoint's, at least 2)")
    parser.add_argument("--limit", type=int, help="the first N glossary sentences (default: all)")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions of each search")
    parser.add_argument("--min-chars", type=int, default=4, help="the shortest word a term may be")
    parser.add_argument("--record", metavar="NAME", help="write docs/records/NAME.json")
    args = parser.parse_args()
    hardware = describe()
    print(hardware)
    goals = targets(args)
    rows, decoded, ratios = bench_constraints(args.ckpt, args.beam, args.limit, args.reps, args.min_chars)
    print_ratios(ratios.items(), goals, digits=3)
    if args.record:
        notes = f"python -m bench.decode.constraints on {args.ckpt.name}: {decoded}; {hardware}"
        header = ["search", "seconds", "terms present", "BLEU"]
        path = RECORDS / f"{args.record}.json"
        write_record(path, table_record(args.record, machine(), notes, header, rows, ratios))
        print(f"record: {path}")


if __name__ == "__main__":
    main()
