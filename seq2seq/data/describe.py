"""What a corpus holds, before hours of training on it: pairs, malformed records by cause, lengths
per side, the share over ``data.max_length``, duplicates, and a vocabulary size.

The corpus is read exactly as training reads it (its cache, which training then reuses). Counts,
characters and duplicates cover every pair (Arrow compute over the memory-mapped cache); token
lengths and the vocabulary size come from a byte-level BPE trained and applied on an evenly spread
sample (:mod:`seq2seq.data.tokenizers.vocab_size`), as training's own tokenizer does not exist yet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seq2seq.config import DataConfig, DataError
from seq2seq.data import corpus
from seq2seq.data.batching import pair_lengths, too_long
from seq2seq.data.readers import malformed
from seq2seq.data.split import evenly_spread
from seq2seq.data.tokenizers import vocab_size
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer

SAMPLE_PAIRS = 20_000  # pairs the BPE learns from and encodes for token lengths
_HASH_BATCH = 100_000  # pairs turned into Python strings at a time to hash them
PERCENTILES = (50, 90, 99, 100)


@dataclass
class Report:
    """Everything the inspect command prints; ``lengths`` maps "en chars", "en tokens"... to percentiles."""

    stats: dict
    verdict: str | None  # the error training would stop with, if any
    distinct_pairs: int
    distinct_sources: int
    same_pairs: int  # source == target
    lengths: dict[str, list[float]] = field(default_factory=dict)
    sample_pairs: int = 0
    over_max_length: float = 0.0  # share of the sample's pairs with a side over data.max_length
    vocabulary: list[vocab_size.Suggestion] = field(default_factory=list)  # one per tokenizer
    seconds: float = 0.0


def _percentiles(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.percentile(values, PERCENTILES)]


def _verdict(stats: dict, max_malformed_share: float) -> str | None:
    try:
        malformed.check(stats, max_malformed_share)
    except DataError as err:
        return str(err)
    return None


def _whole_corpus(table: pa.Table, langs: tuple[str, str], report: Report) -> None:
    """Counts over every pair. Distinct pairs and sources are counted by their 64-bit hashes (Python's,
    within this process), batch by batch, as a hash table of the strings themselves (Arrow's group_by)
    holds a copy of every distinct one. Lengths and equality are Arrow kernels."""
    pair_hashes, source_hashes = [], []
    for batch in table.to_batches(max_chunksize=_HASH_BATCH):
        src, tgt = batch.column("src").to_pylist(), batch.column("tgt").to_pylist()
        pair_hashes.append(np.fromiter(map(hash, zip(src, tgt, strict=True)), np.int64, count=len(src)))
        source_hashes.append(np.fromiter(map(hash, src), np.int64, count=len(src)))
    report.distinct_pairs = len(np.unique(np.concatenate(pair_hashes)))
    report.distinct_sources = len(np.unique(np.concatenate(source_hashes)))
    report.same_pairs = pc.sum(pc.equal(table.column("src"), table.column("tgt"))).as_py() or 0
    for column, lang in zip(("src", "tgt"), langs, strict=True):
        report.lengths[f"{lang} chars"] = _percentiles(pc.utf8_length(table.column(column)).to_numpy())


def _sampled_tokens(pairs: datasets.Dataset, cfg: DataConfig, report: Report) -> None:
    """Token lengths at ``data.vocab_size`` and the suggested size, from one BPE on a sample."""
    sample = evenly_spread(pairs, SAMPLE_PAIRS)
    src, tgt = sample["src"][:], sample["tgt"][:]
    size = max(vocab_size.CANDIDATES[-1], cfg.vocab_size)
    tokenizer = TranslationTokenizer.train(iter(src), iter(tgt), size, cfg.shared_vocab)
    ids = {"src": tokenizer.encode_source(src), "tgt": tokenizer.encode_target(tgt)}
    src_tree = vocab_size.MergeTree(tokenizer.src)
    trees = {"src": src_tree, "tgt": src_tree if tokenizer.shared else vocab_size.MergeTree(tokenizer.tgt)}
    tokens = {}
    for side, lang in (("src", cfg.source_lang), ("tgt", cfg.target_lang)):
        tokens[side] = vocab_size.lengths(ids[side], trees[side].pieces(cfg.vocab_size))
        report.lengths[f"{lang} tokens"] = _percentiles(tokens[side])
    report.sample_pairs = len(sample)
    over = too_long(pair_lengths(tokens["src"], tokens["tgt"]), cfg.max_length)
    report.over_max_length = float(over.mean())
    scale = len(pairs) / len(sample)
    if cfg.shared_vocab:
        report.vocabulary = [vocab_size.suggest(trees["src"], ids["src"] + ids["tgt"], scale)]
    else:
        report.vocabulary = [vocab_size.suggest(trees[side], ids[side], scale) for side in ("src", "tgt")]


def describe_corpus(cfg: DataConfig) -> Report:
    """Read the corpus as training would (building its cache) and measure it."""
    start = time.perf_counter()
    pairs, stats = corpus.read_corpus(corpus.CorpusPlan.of(cfg))
    report = Report(stats, _verdict(stats, cfg.max_malformed_share), 0, 0, 0)
    langs = (cfg.source_lang, cfg.target_lang)
    _whole_corpus(pairs.with_format("arrow")[:], langs, report)  # as selected (a hub dataset is filtered)
    _sampled_tokens(pairs, cfg, report)
    report.seconds = time.perf_counter() - start
    return report
