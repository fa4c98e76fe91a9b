"""Streamed (``data.streaming=true``) against in-memory data at growing corpus sizes: peak memory of
a training process with its loader worker, cold build, warm start and loader tokens/s.

Every run is a fresh subprocess (like bench/data/start.py's pipeline child, here with the loader read for
a number of batches), on synthetic corpora of bench/lib/synthetic_corpus.py. Warm runs of the two paths
alternate, and ratios compare runs of the same invocation. Ends with ``RATIO`` lines and, with
``--record``, a table record for docs/records/.

    python -m bench.data.streaming --pairs 1000000 5000000 --record docs/records/streaming-NAME.json
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.lib.measure import (
    ROOT,
    AnonymousPeak,
    add_target_option,
    print_ratios,
    table_record,
    targets,
    write_record,
)
from bench.lib.synthetic_corpus import write_corpus
from seq2seq.config import DataConfig
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.machine.hardware import describe

BATCHES = 400  # training batches read per warm run
TARGETS = {
    "streamed_loader_tokens_per_s_ratio": 0.9,  # the streamed loader at least this share of in-memory's
    "memory_rank_peak_rss_growth": 1.10,  # peak memory at the largest corpus over the smallest's, at most
    "streamed_rank_peak_rss_growth": 1.10,
    "streamed_cold_anonymous_growth": 1.10,  # the cold build's anonymous memory, largest over smallest
    "streamed_warm_start_s": 10.0,  # process start to the first training batch, at most
}
MODES = {"memory": False, "streamed": True}
_WHICH_SHARD, _WHICH_FILES = re.compile(r"shard \d+ of \d+"), re.compile(r" of /.*")


class _StageEnds(logging.Handler):
    """Ends a stage of :class:`AnonymousPeak` at each cache the data stage reports built, so the cold
    run's peak is split by what was being built (every shard's encoding counts as one stage)."""

    def __init__(self, anonymous: AnonymousPeak) -> None:
        super().__init__(logging.INFO)
        self.anonymous = anonymous

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("built the %s") and record.args:
            what = _WHICH_SHARD.sub("shards", str(record.args[0]))
            self.anonymous.end_stage(_WHICH_FILES.sub("", what))


def _child(path: str, cache_dir: str, streaming: str, batches: str, started: str) -> None:
    """Setup (building what is missing), then ``batches`` training batches through one loader worker."""
    import datasets

    imported = time.time()  # the interpreter started and this module's imports (torch, Lightning) done
    anonymous = AnonymousPeak()
    data_log = logging.getLogger("seq2seq.data")
    data_log.setLevel(logging.INFO)
    data_log.addHandler(_StageEnds(anonymous))
    datasets.disable_progress_bars()
    dm = TranslationDataModule(DataConfig(path=path, cache_dir=cache_dir, streaming=streaming == "True"))
    dm.setup("fit")
    ready = time.time()
    anonymous.end_stage("the rest of the setup")
    loader = iter(dm.train_dataloader())
    first = next(loader)
    first_at = time.time()
    tokens, read = first.real_tokens(), 1
    for batch in loader:
        tokens, read = tokens + batch.real_tokens(), read + 1
        if read == int(batches):
            break
    seconds = time.time() - first_at
    anonymous.end_stage("training batches")
    del loader, batch  # joins the worker, so that its peak is counted below
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    result = {
        "imports_s": imported - float(started),
        "setup_s": ready - float(started),
        "first_batch_s": first_at - float(started),
        "tokens_per_s": (tokens - first.real_tokens()) / max(seconds, 1e-9),
        "peak_rss_gib": own,
        "worker_peak_rss_gib": worker,
        "rank_peak_rss_gib": own + worker,
        "peak_anonymous_gib": anonymous.peak_kib / 2**20,
        "stage_anonymous_gib": {name: kib / 2**20 for name, kib in anonymous.stages.items()},
    }
    print(json.dumps(result))


def run(path: Path, cache_dir: Path, streaming: bool, batches: int) -> dict:
    command = [
        sys.executable,
        "-m",
        "bench.data.streaming",
        "--child",
        str(path),
        str(cache_dir),
        str(streaming),
    ]
    command += [str(batches), repr(time.time())]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(
    pairs: int, scratch: Path, corpora: Path, repeats: int, batches: int, modes: list[str]
) -> dict[str, dict]:
    """Cold and warm runs of the paths ``modes`` on a corpus of ``pairs`` pairs (written into
    ``corpora`` unless it is there: the same seed writes the same bytes)."""
    corpus = corpora / f"synthetic-{pairs}.tsv"
    if not corpus.is_file():
        print(f"{pairs} pairs: corpus written in {write_corpus(corpus, pairs):.0f} s", flush=True)
    results = {}
    for mode in modes:
        cache = scratch / f"cache-{pairs}-{mode}"
        results[mode] = {"cold": run(corpus, cache, MODES[mode], batches), "warm": []}
        print(f"{pairs} {mode} cold: {json.dumps(results[mode]['cold'])}", flush=True)
    for _ in range(repeats):  # alternated, so both paths see the same background load
        for mode in modes:
            streaming = MODES[mode]
            warm = run(corpus, scratch / f"cache-{pairs}-{mode}", streaming, batches)
            results[mode]["warm"].append(warm)
            print(f"{pairs} {mode} warm: {json.dumps(warm)}", flush=True)
    return results


def _tokenizer_stage(cold: dict) -> float:
    """The cold run's peak anonymous GiB while BPE learnt from its sample."""
    return cold["stage_anonymous_gib"]["tokenizer"]


def _besides_tokenizer(cold: dict) -> float:
    """The cold run's peak anonymous GiB over every stage but the tokenizer's."""
    return max(gib for stage, gib in cold["stage_anonymous_gib"].items() if stage != "tokenizer")


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def rows(sizes: dict[int, dict[str, dict]]) -> tuple[list[list[str]], list[tuple[str, float]]]:
    """The record's rows and the RATIO lines."""
    table, ratios = [], []
    for pairs, results in sizes.items():
        for mode in results:
            cold, warm = results[mode]["cold"], results[mode]["warm"]
            table.append(
                [
                    f"{pairs / 1e6:g} M, {mode}",
                    f"{cold['setup_s']:.0f} s",
                    f"{cold['peak_rss_gib']:.2f} / {cold['peak_anonymous_gib']:.2f}",
                    f"{_tokenizer_stage(cold):.2f} / {_besides_tokenizer(cold):.2f}",
                    f"{_median(warm, 'first_batch_s'):.1f} s ({_median(warm, 'imports_s'):.1f} s)",
                    f"{_median(warm, 'rank_peak_rss_gib'):.2f} ({_median(warm, 'worker_peak_rss_gib'):.2f})",
                    f"{_median(warm, 'tokens_per_s'):,.0f}",
                ]
            )
        if len(results) == len(MODES):
            ratio = _median(results["streamed"]["warm"], "tokens_per_s") / _median(
                results["memory"]["warm"], "tokens_per_s"
            )
            ratios.append((f"streamed_loader_tokens_per_s_ratio_{pairs}", ratio))
        if "streamed" in results:
            start = _median(results["streamed"]["warm"], "first_batch_s")
            ratios.append((f"streamed_warm_start_s_{pairs}", start))
    for mode in MODES:
        measured = [pairs for pairs, results in sizes.items() if mode in results]
        smallest, largest = min(measured, default=0), max(measured, default=0)
        if largest == smallest:
            continue
        grow = _median(sizes[largest][mode]["warm"], "rank_peak_rss_gib") / _median(
            sizes[smallest][mode]["warm"], "rank_peak_rss_gib"
        )
        ratios.append((f"{mode}_rank_peak_rss_growth_{largest}_over_{smallest}", grow))
        if mode == "streamed":
            cold = (
                sizes[largest][mode]["cold"]["peak_anonymous_gib"]
                / sizes[smallest][mode]["cold"]["peak_anonymous_gib"]
            )
            ratios.append((f"streamed_cold_anonymous_growth_{largest}_over_{smallest}", cold))
            besides = _besides_tokenizer(sizes[largest][mode]["cold"]) / _besides_tokenizer(
                sizes[smallest][mode]["cold"]
            )
            name = f"streamed_cold_anonymous_growth_{largest}_over_{smallest}_besides_the_tokenizer"
            ratios.append((name, besides))
    return table, ratios


HEADER = [
    "pairs, path",
    "cold build (setup)",
    "cold peak RSS / anonymous, GiB",
    "cold peak anonymous while BPE learns / in every other stage, GiB",
    "warm: to the first batch (of which starting Python and importing)",
    "warm: peak RSS of the process and its loader worker (worker), GiB",
    "loader tokens/s",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--repeats", type=int, default=2, help="warm runs of each path, alternated")
    parser.add_argument("--batches", type=int, default=BATCHES, help="training batches read per warm run")
    parser.add_argument("--record", type=Path, help="write the table record here")
    parser.add_argument("--corpora", type=Path, help="keep the synthetic corpora here (default: deleted)")
    parser.add_argument(
        "--memory-up-to",
        type=int,
        help="run the in-memory path only on corpora up to this many pairs (its build is the slower)",
    )
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    add_target_option(parser, TARGETS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    machine = describe()
    print(machine)
    sizes: dict[int, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for pairs in args.pairs:  # the record is rewritten after each size: a long run keeps its part
            corpora = args.corpora or Path(scratch)
            with_memory = args.memory_up_to is None or pairs <= args.memory_up_to
            modes = list(MODES) if with_memory else ["streamed"]
            sizes[pairs] = measure(pairs, Path(scratch), corpora, args.repeats, args.batches, modes)
            report(args, machine, *rows(sizes))


def report(args: argparse.Namespace, machine: str, table: list[list[str]], ratios: list) -> None:
    """The RATIO lines, and with ``--record`` the table record."""
    goals = targets(args)
    print_ratios(ratios, goals, digits=3)
    if args.record:
        notes = (
            f"python -m bench.data.streaming --pairs {' '.join(map(str, args.pairs))} --repeats "
            f"{args.repeats} --batches {args.batches}"
            + (f" --memory-up-to {args.memory_up_to}" if args.memory_up_to is not None else "")
            + ": medians of the alternated warm runs, one loader worker"
        )
        write_record(args.record, table_record(args.record.stem, machine, notes, HEADER, table, dict(ratios)))


if __name__ == "__main__":
    main()
