"""Data pipeline benchmark: cold vs cached setup, padding waste, and a corpus of millions of pairs.

Each pipeline run happens in its own subprocess so its peak RSS is its own and nothing
(imports, page cache aside) is warm; its clock starts before the subprocess does. A run
goes from process start through the data module's setup (building what is not cached) to
the first collated training batch, with the default data settings. ``--pairs N`` adds a
deterministic synthetic corpus of N new pairs (bench/synthetic_corpus.py), built cold and
started warm. Ends with ``RATIO <name> <value> target <target>`` lines.

    python bench/data.py                   # bundled corpus, cold + cached + padding
    python bench/data.py --pairs 5000000   # also 5M synthetic pairs: cold, warm, RSS, cache size
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from seq2seq.config import DataConfig  # noqa: E402
from seq2seq.data.batching import TokenBudgetBatchSampler  # noqa: E402
from seq2seq.data.datamodule import TranslationDataModule  # noqa: E402
from seq2seq.hardware import describe  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from synthetic_corpus import write_corpus  # noqa: E402

CORPUS = ROOT / "data" / "spa-eng" / "spa.txt.gz"


class AnonymousPeak:
    """Peak anonymous memory (heap, arrays) of this process, sampled every 20 ms. Peak RSS also
    counts the pages of memory-mapped caches that were read, which the kernel can drop at will."""

    def __init__(self) -> None:
        self.peak_kib = 0
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            with open("/proc/self/status") as status:
                line = next(line for line in status if line.startswith("RssAnon:"))
            self.peak_kib = max(self.peak_kib, int(line.split()[1]))
            time.sleep(0.02)


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
    command = [sys.executable, __file__, "--child", str(path), str(cache_dir), repr(time.time())]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
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


def _padding(src_len: np.ndarray, tgt_len: np.ndarray, batches: list[np.ndarray]) -> float:
    """Share of the src (B, S) and tgt (B, T) tensors that is padding, over all batches."""
    real = padded = 0
    for batch in batches:
        s, t = src_len[batch] + 1, tgt_len[batch] + 1  # EOS on the source, BOS/EOS on the target
        real += s.sum() + t.sum()
        padded += len(batch) * (s.max() + t.max())
    return 1.0 - real / padded


def padding_report(cache_dir: Path) -> tuple[float, float, int]:
    """Padding of token-budget batches vs random batches with the same mean tokens per batch."""
    cfg = DataConfig(path=str(CORPUS), cache_dir=str(cache_dir))
    dm = TranslationDataModule(cfg)
    dm.setup("fit")
    table = dm.splits["train"].with_format("arrow")
    src_len = pc.list_value_length(table["src_ids"]).to_numpy()
    tgt_len = pc.list_value_length(table["tgt_ids"]).to_numpy()
    sampler = TokenBudgetBatchSampler(np.maximum(src_len, tgt_len) + 1, cfg.max_tokens, True, seed=0)
    budget = [np.asarray(batch) for batch in sampler]
    fixed_size = round(len(src_len) / len(budget))  # same number of batches => same mean tokens
    order = np.random.default_rng(0).permutation(len(src_len))
    fixed = [order[i : i + fixed_size] for i in range(0, len(order), fixed_size)]
    return _padding(src_len, tgt_len, budget), _padding(src_len, tgt_len, fixed), fixed_size


def scale_report(n_pairs: int) -> list[tuple[str, float, float]]:
    """Cold build and warm start of ``n_pairs`` synthetic pairs, against the issue's targets."""
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
        ("data_scale_cold_build_seconds", cold["first_batch_seconds"], 300),
        ("data_scale_warm_start_seconds", warm["first_batch_seconds"], 10),
        ("data_scale_peak_rss_gib", max(cold["peak_rss_gib"], warm["peak_rss_gib"]), 1),
        ("data_scale_peak_anonymous_gib", max(cold["peak_anonymous_gib"], warm["peak_anonymous_gib"]), 1),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pairs", type=int, default=0, help="also build and start a synthetic corpus of N pairs"
    )
    parser.add_argument("--child", nargs=3, metavar=("PATH", "CACHE_DIR", "STARTED"), help=argparse.SUPPRESS)
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
        budget, fixed, fixed_size = padding_report(Path(scratch))
    print(f"padding: token budget {budget:.3f}, random batches of {fixed_size} {fixed:.3f}")
    ratios += [("data_cold_seconds", cold["seconds"], 30), ("data_cached_seconds", cached["seconds"], 5)]
    ratios.append(("padding_fraction_token_budget", budget, 0.10))
    if args.pairs:
        ratios += scale_report(args.pairs)
    for name, value, target in ratios:
        print(f"RATIO {name} {value:.3f} target {target}")


if __name__ == "__main__":
    main()
