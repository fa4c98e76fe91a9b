"""``python -m seq2seq.inference.shortlist --ckpt CKPT``: build a run's vocabulary shortlist from its training
pairs, beside the checkpoint (:mod:`seq2seq.decoding.shortlist` says what it is and owns the file).

It counts, over the training split the checkpoint's data config rebuilds, in how many pairs each
source type and target type occur together, and keeps each source type's ``--per-source`` target
types of highest Dice coefficient, 2·c(s, t) / (c(s) + c(t)), plus the ``--frequent`` most frequent
target types. ``translate.py --shortlist`` and ``serve.py --shortlist`` use it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from seq2seq.command_line import OneLineParser, UsageError, run_command
from seq2seq.config import DataError
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer
from seq2seq.decoding.shortlist import FILE_NAME, Shortlist, ShortlistError, default_path
from seq2seq.formats.checkpoint import CheckpointError, load_model

PROG = "python -m seq2seq.inference.shortlist"
BESIDE = ""  # --shortlist without a path: the file beside the checkpoint
PER_SOURCE = 20  # target types kept per source type
FREQUENT = 300  # most frequent target types, always candidates
CHUNK = 20_000  # pairs tokenized and counted together
ROWS = 512  # source types ranked together (a (ROWS, V_tgt) float block)


def fingerprint(tokenizer: TranslationTokenizer) -> str:
    """Which tokenizer a shortlist's ids belong to."""
    return hashlib.sha256(json.dumps(tokenizer.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def open_shortlist(path: str | Path, tokenizer: TranslationTokenizer) -> Shortlist:
    """The shortlist at ``path``, refused in one line unless built for ``tokenizer``."""
    return Shortlist.load(path, fingerprint(tokenizer))


def add_shortlist_argument(parser: argparse.ArgumentParser) -> None:
    """``--shortlist [PATH]`` of translate.py and serve.py: without PATH, the one beside ``--ckpt``."""
    parser.add_argument(
        "--shortlist",
        nargs="?",
        const=BESIDE,
        metavar="PATH",
        help="restrict each batch's output to its shortlist's candidate types (with --ckpt; default PATH: "
        f"{FILE_NAME} beside the checkpoint, built by {PROG})",
    )


def check_shortlist_argument(shortlist: str | None, ckpt: str | list[str] | None) -> None:
    """Refuse ``--shortlist`` (``shortlist``) with ``--model`` (no ``ckpt``) before anything is loaded."""
    if shortlist is not None and not ckpt:
        raise UsageError("--shortlist needs --ckpt: an exported model decodes over its whole vocabulary")


class Counts:
    """Pair counts: c(s, t), c(s), c(t) and each target type's token count."""

    def __init__(self, src_vocab: int, tgt_vocab: int) -> None:
        self.pairs = np.zeros((src_vocab, tgt_vocab), dtype=np.int32)
        self.src = np.zeros(src_vocab, dtype=np.int64)
        self.tgt = np.zeros(tgt_vocab, dtype=np.int64)
        self.tokens = np.zeros(tgt_vocab, dtype=np.int64)

    def add(self, sources: list[list[int]], targets: list[list[int]]) -> None:
        keys = []
        tgt_vocab = self.tgt.size
        for src_ids, tgt_ids in zip(sources, targets, strict=True):
            s, t = np.unique(src_ids), np.unique(tgt_ids)
            self.src[s] += 1
            self.tgt[t] += 1
            keys.append((s[:, None] * tgt_vocab + t).ravel())
        np.add.at(self.tokens, np.concatenate([np.asarray(ids, dtype=np.int64) for ids in targets]), 1)
        unique, counts = np.unique(np.concatenate(keys), return_counts=True)
        self.pairs.reshape(-1)[unique] += counts.astype(np.int32)

    def shortlist(self, per_source: int, frequent: int, copy_source: bool, tokenizer: str) -> Shortlist:
        lists = []
        for start in range(0, self.src.size, ROWS):
            block = self.pairs[start : start + ROWS].astype(np.float32)  # (rows, V_tgt)
            dice = 2 * block / np.maximum(self.src[start : start + ROWS, None] + self.tgt[None, :], 1)
            k = min(per_source, dice.shape[1])
            best = np.argpartition(-dice, k - 1, axis=1)[:, :k]  # (rows, k), unordered
            for row, columns in enumerate(best):
                lists.append(np.sort(columns[block[row, columns] > 0]))
        offsets = np.concatenate([[0], np.cumsum([len(ids) for ids in lists])])
        top = np.argsort(-self.tokens, kind="stable")[:frequent]
        return Shortlist(offsets, np.concatenate(lists), np.sort(top), self.tgt.size, copy_source, tokenizer)


def build(ckpt: str | Path, per_source: int = PER_SOURCE, frequent: int = FREQUENT) -> Shortlist:
    """The shortlist of the checkpoint's training split (rebuilt from its data config)."""
    from seq2seq.data import corpus  # datasets: seconds to import, only needed here

    loaded = load_model(ckpt, map_location="cpu")
    tokenizer = loaded.tokenizer
    try:
        train = corpus.load_splits(loaded.data_config)[0]["train"]
    except OSError as err:
        raise DataError(str(err)) from err
    counts = Counts(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    rows = train.select_columns(["src", "tgt"]).iter(batch_size=CHUNK)
    for batch in tqdm(
        rows, total=-(-len(train) // CHUNK), unit=" chunks", desc="counting pairs", file=sys.stderr
    ):
        counts.add(tokenizer.encode_source(batch["src"]), tokenizer.encode_target(batch["tgt"]))
    shared = tokenizer.src_vocab_size == tokenizer.tgt_vocab_size and loaded.data_config.shared_vocab
    return counts.shortlist(per_source, frequent, shared, fingerprint(tokenizer))


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Build the vocabulary shortlist of a checkpoint (translate.py --shortlist).",
    )
    parser.add_argument("--ckpt", required=True, metavar="PATH", help="checkpoint written by train.py")
    parser.add_argument(
        "--output", metavar="PATH", help="file to write (default: shortlist.npz beside the checkpoint)"
    )
    parser.add_argument(
        "--per-source",
        type=int,
        default=PER_SOURCE,
        metavar="K",
        help=f"target types per source type (default: {PER_SOURCE})",
    )
    parser.add_argument(
        "--frequent",
        type=int,
        default=FREQUENT,
        metavar="N",
        help=f"most frequent target types kept (default: {FREQUENT})",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    for name in ("per_source", "frequent"):
        if getattr(args, name) < 0 or (name == "per_source" and args.per_source == 0):
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    output = Path(args.output) if args.output else default_path(args.ckpt)
    if not output.parent.is_dir():
        raise UsageError(f"cannot write {output}: its directory does not exist")
    shortlist = build(args.ckpt, args.per_source, args.frequent)
    shortlist.save(output)
    print(
        f"shortlist of {shortlist.targets.size:,} source-target entries written to {output}", file=sys.stderr
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Build the shortlist; returns the exit code instead of raising (tests call this in-process)."""
    errors = (CheckpointError, DataError, ShortlistError, OSError)
    return run_command(PROG, lambda: run(build_parser().parse_args(argv)), errors)


if __name__ == "__main__":
    sys.exit(main())
