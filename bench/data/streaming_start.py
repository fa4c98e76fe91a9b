"""The part of a streamed run's warm start that grows with the corpus, at sizes whose full build
would take hours: opening the store, counting the epoch's batches and forming the first window's.

For each ``--pairs``, a store of that many pairs is written with lengths only (``lengths.u16``,
``meta.json`` and the manifest, as ``seq2seq/data/streamed/shards.py`` writes them; no ids, which the count
does not read), its lengths drawn from the bundled corpus's. A fresh process then opens it and
times the sampler: counting from the blocks' length histograms (what training does) against
sorting and packing every window (the count before), and the first window's batches. Everything
else a warm start does (imports, the tokenizer, the held-out splits, the loader's worker) does not
depend on the training corpus's size. ``--corpus FILE`` also times hashing that file, the first
time and from the digest memo. With ``--record``, a table record for docs/records/.

    python -m bench.data.streaming_start --pairs 5000000 50000000 --corpus CORPUS.tsv
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.lib.measure import (
    ROOT,
    bench_parser,
    print_ratios,
    table_record,
    targets,
    write_record,
)
from seq2seq.config import DataConfig
from seq2seq.data.cache import file_digest
from seq2seq.data.streamed import build
from seq2seq.data.streamed.batches import StreamedBatchSampler
from seq2seq.data.streamed.shards import LENGTHS_FILE, META_FILE, Store, write_manifest
from seq2seq.machine.hardware import describe

TARGETS = {"sampler_start_s": 10.0}  # the warm start's target, which this part must leave room in
BLOCK_ROWS, SHARD_PAIRS = build.BLOCK_ROWS, DataConfig().shard_pairs
HEADER = [
    "pairs",
    "store opened",
    "batches counted: from histograms (sorting every window)",
    "first window's batches",
    "histograms held, MiB",
    "peak RSS, GiB",
]


def bundled_histogram(scratch: Path) -> np.ndarray:
    """Pairs of each padded length in the bundled corpus's store (built in ``scratch``)."""
    return build.build(DataConfig(cache_dir=str(scratch), streaming=True)).store.histogram


def write_lengths_store(root: Path, pairs: int, histogram: np.ndarray) -> None:
    """A store of ``pairs`` pairs, lengths only, drawn from ``histogram``; default shard and block sizes."""
    rng = np.random.default_rng(0)
    share = histogram / histogram.sum()
    shards = []
    for index, first in enumerate(range(0, pairs, SHARD_PAIRS)):
        rows = min(SHARD_PAIRS, pairs - first)
        directory = root / f"shard-{index:05d}"
        directory.mkdir(parents=True)
        lengths = rng.choice(len(share), size=rows, p=share).astype("<u2")
        lengths.tofile(directory / LENGTHS_FILE)
        blocks = [min(BLOCK_ROWS, rows - at) for at in range(0, rows, BLOCK_ROWS)]
        shard_histogram = np.bincount(lengths).tolist()
        meta = {"blocks": blocks, "histogram": shard_histogram, "id_type": "uint16"}
        (directory / META_FILE).write_text(json.dumps(meta))
        shards.append(directory)
    (root / "manifest").mkdir()
    write_manifest(root, shards, root / "manifest")


def _child(root: str) -> None:
    """Times of one fresh process: open, count (both ways), the first window's batches."""
    started = time.perf_counter()
    store = Store.open(Path(root), Path(root) / "manifest")
    opened = time.perf_counter()
    cfg = DataConfig()
    sampler = StreamedBatchSampler(store, cfg.max_tokens, 0, cfg.max_length)
    batches = len(sampler)
    counted = time.perf_counter()
    next(iter(sampler))
    first = time.perf_counter()
    sorted_count = sum(len(sampler.window_batches(w, blocks)) for w, blocks in enumerate(sampler.windows()))
    by_sorting = time.perf_counter() - first
    assert sorted_count == batches, (sorted_count, batches)
    held = store.block_histograms(cfg.max_length + 2).nbytes  # computed by the count, kept
    result = {
        "open_s": opened - started,
        "count_s": counted - opened,
        "count_by_sorting_s": by_sorting,
        "first_window_s": first - counted,
        "histograms_mib": held / 2**20,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "batches": batches,
    }
    print(json.dumps(result))


def digest_times(corpus: Path, memo: Path) -> tuple[float, float]:
    """Seconds to hash ``corpus`` the first time, and again with its digest kept in ``memo``."""
    started = time.perf_counter()
    file_digest(corpus, memo)
    first = time.perf_counter()
    file_digest(corpus, memo)
    return first - started, time.perf_counter() - first


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    parser.add_argument("--pairs", type=int, nargs="+", default=[5_000_000, 50_000_000])
    parser.add_argument(
        "--corpus", type=Path, help="also time hashing this corpus file, with and without the memo"
    )
    parser.add_argument("--record", type=Path, help="write the table record here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return
    machine = describe()
    print(machine)
    table, ratios = [], []
    with tempfile.TemporaryDirectory() as scratch:
        histogram = bundled_histogram(Path(scratch) / "cache")
        for pairs in args.pairs:
            root = Path(scratch) / f"store-{pairs}"
            write_lengths_store(root, pairs, histogram)
            command = [sys.executable, "-m", "bench.data.streaming_start", "--child", str(root)]
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{pairs}: {json.dumps(result)}", flush=True)
            start = result["open_s"] + result["count_s"] + result["first_window_s"]
            table.append(
                [
                    f"{pairs / 1e6:g} M",
                    f"{result['open_s']:.2f} s",
                    f"{result['count_s']:.2f} s ({result['count_by_sorting_s']:.1f} s)",
                    f"{result['first_window_s']:.3f} s",
                    f"{result['histograms_mib']:.1f}",
                    f"{result['peak_rss_gib']:.2f}",
                ]
            )
            ratios.append((f"sampler_start_s_{pairs}", start))
        if args.corpus:
            first, again = digest_times(args.corpus, Path(scratch) / "digests")
            size = args.corpus.stat().st_size / 2**30
            what = f"hashing {args.corpus.name} ({size:.2f} GiB): first time / from the digest memo"
            table.append([what, f"{first:.1f} s / {1000 * again:.1f} ms", "", "", "", ""])
    goals = targets(args)
    print_ratios(ratios, goals)
    if args.record:
        notes = f"python -m bench.data.streaming_start --pairs {' '.join(map(str, args.pairs))}" + (
            f" --corpus {args.corpus.name}" if args.corpus else ""
        )
        write_record(args.record, table_record(args.record.stem, machine, notes, HEADER, table, dict(ratios)))


if __name__ == "__main__":
    main()
