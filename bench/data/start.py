"""The data pipeline's start: cold and cached, on the bundled corpus and on a corpus of millions of pairs.

Each pipeline run happens in its own subprocess so its peak RSS is its own and nothing
(imports, page cache aside) is warm; its clock starts before the subprocess does. A run
goes from process start through the data module's setup (building what is not cached) to
the first collated training batch, with the default data settings. ``--pairs N`` adds a
deterministic synthetic corpus of N new pairs (bench/lib/synthetic_corpus.py), built cold and
started warm. Ends with ``RATIO <name> <value> target <target>`` lines.

    python -m bench.data.start             # bundled corpus, cold + cached
    python -m bench.data.start --pairs 5000000  # also 5M synthetic pairs: cold, warm, RSS, cache size
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

from bench.lib.measure import (
    CORPUS,
    ROOT,
    AnonymousPeak,
    add_target_option,
    print_ratios,
    targets,
)
from bench.lib.synthetic_corpus import write_corpus
from seq2seq.config import DataConfig
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.machine.hardware import describe

TARGETS = {
    "data_cold_seconds": 30,  # at most, from process start: load, split, train BPE, encode
    "data_cached_seconds": 5,  # at most, from process start with the cache built
    "data_scale_cold_build_seconds": 300,  # --pairs: to the first batch, cache built from nothing
    "data_scale_warm_start_seconds": 10,  # --pairs: to the first batch, cache built
    "data_scale_peak_rss_gib": 1,  # --pairs: at most, cold or warm
    "data_scale_peak_anonymous_gib": 1,
}


def _pipeline(path: str, cache_dir: str, started: str) -> None:
    """Child process: seconds from ``started`` (the parent's clock before it started this process)
    to the data ready and to the first training batch, and the peak memory, as JSON."""
    import datasets

    anonymous = AnonymousPeak()
    datasets.disable_progress_bars()
    dm = TranslationDataModule(DataConfig(path=path, cache_dir=cache_dir))
    dm.setup("fit")
    ready = time.time()
    next(iter(dm.train_dataloader()))
    first_batch = time.time()
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    result = {
        "seconds": ready - float(started),
        "first_batch_seconds": first_batch - float(started),
        "peak_rss_gib": peak_gib,
        "peak_anonymous_gib": anonymous.peak_kib / 2**20,
        "pairs": sum(map(len, dm.raw_splits.values())),
    }
    print(json.dumps(result))


def run_pipeline(path: Path, cache_dir: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "bench.data.start",
        "--child",
        str(path),
        str(cache_dir),
        repr(time.time()),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"pipeline run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summary(label: str, run: dict) -> str:
    return (
        f"{label}: {run['pairs']} pairs, data ready in {run['seconds']:.2f} s, first training batch at "
        f"{run['first_batch_seconds']:.2f} s, peak RSS {run['peak_rss_gib']:.2f} GiB "
        f"(anonymous {run['peak_anonymous_gib']:.2f} GiB)"
    )


def _size_gib(directory: Path) -> float:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file()) / 2**30


def scale_report(n_pairs: int) -> list[tuple[str, float]]:
    """Cold build and warm start of ``n_pairs`` synthetic pairs: seconds and peak memory."""
    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch) / f"synthetic-{n_pairs}.tsv"
        seconds = write_corpus(corpus, n_pairs)
        print(f"synthetic corpus: {n_pairs} pairs written in {seconds:.0f} s")
        cold = run_pipeline(corpus, Path(scratch) / "cache")
        print(_summary(f"{n_pairs} pairs, cold", cold))
        warm = run_pipeline(corpus, Path(scratch) / "cache")
        print(_summary(f"{n_pairs} pairs, warm", warm))
        cache_gib, corpus_gib = _size_gib(Path(scratch) / "cache"), corpus.stat().st_size / 2**30
        print(f"cache: {cache_gib:.2f} GiB for a {corpus_gib:.2f} GiB corpus")
    return [
        ("data_scale_cold_build_seconds", cold["first_batch_seconds"]),
        ("data_scale_warm_start_seconds", warm["first_batch_seconds"]),
        ("data_scale_peak_rss_gib", max(cold["peak_rss_gib"], warm["peak_rss_gib"])),
        ("data_scale_peak_anonymous_gib", max(cold["peak_anonymous_gib"], warm["peak_anonymous_gib"])),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pairs", type=int, default=0, help="also build and start a synthetic corpus of N pairs"
    )
    parser.add_argument("--child", nargs=3, metavar=("PATH", "CACHE_DIR", "STARTED"), help=argparse.SUPPRESS)
    add_target_option(parser, TARGETS)
    args = parser.parse_args()
    if args.child:
        _pipeline(*args.child)
        return
    print(describe())
    ratios = []
    with tempfile.TemporaryDirectory() as scratch:
        cold = run_pipeline(CORPUS, Path(scratch))
        cached = run_pipeline(CORPUS, Path(scratch))
        print(_summary("cold", cold))
        print(_summary("cached", cached))
    ratios += [("data_cold_seconds", cold["seconds"]), ("data_cached_seconds", cached["seconds"])]
    if args.pairs:
        ratios += scale_report(args.pairs)
    goals = targets(args)
    print_ratios(ratios, goals, digits=3)


if __name__ == "__main__":
    main()
