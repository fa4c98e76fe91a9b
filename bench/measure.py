"""What the speed benchmarks share: a model's sizes from its config file, real sentence pairs from
the bundled corpus, and medians of interleaved timings. Nothing here imports an export backend, so
a training benchmark runs where only training's packages are installed."""

from __future__ import annotations

import gzip
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from omegaconf import OmegaConf

from seq2seq.config import ModelConfig, validated

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "data" / "spa-eng" / "spa.txt.gz"


def model_config(name: str) -> ModelConfig:
    """The sizes of ``configs/model/<name>.yaml``, validated as training validates them."""
    return validated(ModelConfig, OmegaConf.load(ROOT / "configs" / "model" / f"{name}.yaml"), "model")


def sample_corpus_pairs(count: int) -> tuple[list[str], list[str]]:
    """``count`` (English, Spanish) pairs spread evenly over the corpus, which is sorted by length."""
    with gzip.open(CORPUS, "rt", encoding="utf-8") as handle:
        pairs = [line.rstrip("\n").split("\t")[:2] for line in handle]
    picked = [pairs[int(i * len(pairs) / count)] for i in range(count)]
    return [en for en, _ in picked], [es for _, es in picked]


def median_times(runs: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Median seconds of each run, repetitions interleaved so drifting machine load hits all alike.

    On a GPU (CUDA is asynchronous) the queue is drained before the first run, so earlier kernels
    finish outside the timings, and inside each timing, so a run is timed to its last kernel."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    for _ in range(reps):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}
