"""Corpus BLEU and chrF with sacrebleu, against every reference each source has; the pairs
``translate.py --eval`` reads and the record its ``--metrics-out`` writes.

Tatoeba-style corpora give one source several translations, a different number each.
sacrebleu takes references as parallel streams; a source with fewer references than the
widest one is padded with ``None``, which sacrebleu drops per segment (signature
``nrefs:var``). Padding with "" would be wrong: an empty reference is kept, and as the
closest reference length it changes BLEU's brevity penalty.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sacrebleu.metrics import BLEU, CHRF

from seq2seq.config import DataConfig, DataError

if TYPE_CHECKING:
    from seq2seq.inference.translator import TranslatorBase

LENGTH_BUCKETS = ((1, 5), (6, 10), (11, 15), (16, 20), (21, 30), (31, None))  # source words, inclusive


def reference_streams(references: list[list[str]]) -> list[list[str | None]]:
    """Per-source reference lists -> sacrebleu's parallel streams, short lists padded with None."""
    width = max(len(refs) for refs in references)
    return [[refs[i] if i < len(refs) else None for refs in references] for i in range(width)]


def _bucket_name(low: int, high: int | None) -> str:
    return f"{low}+" if high is None else f"{low}-{high}"


def bleu_by_length(
    hypotheses: list[str], references: list[list[str]], sources: list[str]
) -> dict[str, dict[str, float]]:
    """Corpus BLEU of the sources in each word-count bucket: {"1-5": {"bleu": .., "count": ..}, ...}."""
    words = [len(source.split()) for source in sources]
    result = {}
    for low, high in LENGTH_BUCKETS:
        members = [i for i, n in enumerate(words) if n >= low and (high is None or n <= high)]
        if members:
            streams = reference_streams([references[i] for i in members])
            bleu = BLEU().corpus_score([hypotheses[i] for i in members], streams).score
            result[_bucket_name(low, high)] = {"bleu": bleu, "count": len(members)}
    return result


def score(
    hypotheses: list[str], references: list[list[str]], sources: list[str] | None = None
) -> dict[str, Any]:
    """BLEU and chrF (with their sacrebleu signatures) using all references of each source.

    Returns {"bleu", "chrf", "bleu_signature", "chrf_signature", "count"}, plus "bleu_by_length"
    (see :func:`bleu_by_length`) when ``sources`` are given.
    """
    if not hypotheses or len(hypotheses) != len(references):
        raise ValueError(f"need one reference list per hypothesis: {len(hypotheses)} vs {len(references)}")
    if any(not refs for refs in references):
        raise ValueError("every source needs at least one reference")
    streams = reference_streams(references)
    bleu, chrf = BLEU(), CHRF()
    result: dict[str, Any] = {
        "bleu": bleu.corpus_score(hypotheses, streams).score,
        "chrf": chrf.corpus_score(hypotheses, streams).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "count": len(hypotheses),
    }
    if sources is not None:
        result["bleu_by_length"] = bleu_by_length(hypotheses, references, sources)
    return result


@dataclass
class Evaluation:
    """Translations of an evaluation set and their scores."""

    hypotheses: list[str]
    scores: dict[str, Any]


def evaluate(translator: TranslatorBase, sources: list[str], references: list[list[str]]) -> Evaluation:
    """Translate ``sources`` with the translator's settings and score them against all references."""
    hypotheses = [best.text for best, *_ in translator.translate(sources)]
    return Evaluation(hypotheses, score(hypotheses, references, sources))


def format_scores(scores: dict[str, Any]) -> str:
    """Human-readable report: BLEU and chrF with signatures, then BLEU per source-length bucket."""
    lines = [
        f"BLEU = {scores['bleu']:.2f}  {scores['bleu_signature']}",
        f"chrF = {scores['chrf']:.2f}  {scores['chrf_signature']}",
        f"sentences = {scores['count']}",
    ]
    for name, bucket in scores.get("bleu_by_length", {}).items():
        lines.append(f"BLEU[src words {name}] = {bucket['bleu']:.2f}  (n={bucket['count']})")
    return "\n".join(lines)


def metrics_record(spec: str, translator: TranslatorBase, reason: str, scores: dict, seconds: float) -> dict:
    """What ``translate.py --metrics-out`` writes: one evaluation, with the numerics it ran in."""
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


def read_eval_pairs(
    path: str | Path, src_column: int = 0, ref_column: int = 1
) -> tuple[list[str], list[list[str]]]:
    """Unique sources (first-seen order) of a TSV file (.gz ok) and all references of each.

    Blank lines are skipped; a line without the needed columns, text that is not UTF-8 or a file
    without pairs is a :class:`DataError` (the first names the line).
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    grouped: dict[str, list[str]] = {}
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                fields = line.rstrip("\r\n").split("\t")
                if len(fields) <= max(src_column, ref_column):
                    raise DataError(f"{path}:{number}: expected tab-separated source and reference columns")
                grouped.setdefault(fields[src_column].strip(), []).append(fields[ref_column].strip())
    except UnicodeDecodeError as err:
        raise DataError(str(err)) from err
    if not grouped:
        raise DataError(f"{path} holds no sentence pairs")
    return list(grouped), list(grouped.values())


def eval_set(spec: str, data_cfg: DataConfig) -> tuple[list[str], list[list[str]]]:
    """Sources and references of ``translate.py --eval``: a split rebuilt from the data config, or a TSV
    of pairs laid out as ``data.columns``."""
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
