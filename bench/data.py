"""Data pipeline benchmark: cold vs cached setup, padding waste, and scaling with corpus size.

Each pipeline run happens in its own subprocess so its peak RSS is its own and
nothing (imports, page cache aside) is warm. Ends with ``RATIO <name> <value>
target <target>`` lines for automated checks.

    python bench/data.py              # bundled corpus, cold + cached + padding
    python bench/data.py --scale 10   # also the corpus repeated 10x
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
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

CORPUS = ROOT / "data" / "spa-eng" / "spa.txt.gz"


def _pipeline(path: str, cache_dir: str) -> None:
    """Child process: time prepare + setup and report it with the peak RSS as JSON."""
    import datasets

    datasets.disable_progress_bars()
    start = time.perf_counter()
    dm = TranslationDataModule(DataConfig(path=path, cache_dir=cache_dir))
    dm.prepare_data()
    dm.setup("fit")
    seconds = time.perf_counter() - start
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    print(
        json.dumps({"seconds": seconds, "peak_rss_gib": peak_gib, "pairs": sum(map(len, dm.splits.values()))})
    )


def run_pipeline(path: Path, cache_dir: Path) -> dict:
    command = [sys.executable, __file__, "--child", str(path), str(cache_dir)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"pipeline run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summary(label: str, run: dict) -> str:
    return f"{label}: {run['pairs']} pairs in {run['seconds']:.2f} s, peak RSS {run['peak_rss_gib']:.2f} GiB"


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


def _repeat_corpus(directory: Path, times: int) -> Path:
    path = directory / f"corpus-x{times}.tsv"
    text = gzip.decompress(CORPUS.read_bytes())
    with path.open("wb") as out:
        for _ in range(times):
            out.write(text)
    return path


def scale_report(scale: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as scratch:
        runs = {}
        for times in (1, scale):
            corpus = _repeat_corpus(Path(scratch), times)
            runs[times] = run_pipeline(corpus, Path(scratch) / f"cache-x{times}")
            corpus.unlink()
            print(_summary(f"corpus x{times}", runs[times]))
    return runs[scale]["seconds"] / runs[1]["seconds"], runs[scale]["peak_rss_gib"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=0, help="also run the corpus repeated N times")
    parser.add_argument("--child", nargs=2, metavar=("PATH", "CACHE_DIR"), help=argparse.SUPPRESS)
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
    if args.scale > 1:
        time_ratio, peak = scale_report(args.scale)
        ratios += [("data_scale_time_ratio", time_ratio, args.scale), ("data_scale_peak_rss_gib", peak, 2)]
    for name, value, target in ratios:
        print(f"RATIO {name} {value:.3f} target {target}")


if __name__ == "__main__":
    main()
