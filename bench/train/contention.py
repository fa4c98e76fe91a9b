"""Training speed beside one busy process: ours and its ``torch.nn.Transformer`` twin, idle and busy.

Both models (``bench/lib/training_step.py``) train on the same real batches; each repetition times both with
the machine idle, then both beside one CPU-bound process (a plain Python loop, as on a laptop or CI
runner) that the benchmark starts itself. Medians of tokens/s; the ratios are the share of its idle
speed ours keeps, and ours against the twin when both share the machine.

    python -m bench.train.contention [--sizes small_postnorm base] [--dtype fp32|bf16|auto] [--reps 3]
"""

from __future__ import annotations

import seq2seq.machine.threads  # noqa: F401  (OpenMP's wait policy as in training: before torch loads)

# isort: split
import argparse
import contextlib
import statistics

from bench.lib.measure import (
    busy_process,
    median_times,
    print_ratios,
)
from bench.lib.training_step import Twins, step_bench, twins, variant

TARGETS = {
    "train_contention_keep": 0.45,  # ours keeps at least this share of its idle tokens/s
    "train_contention_vs_twin": 1.0,  # ours at least as fast as the twin, both beside the busy process
}


def bench_contention(models: Twins, args: argparse.Namespace) -> list[tuple[str, float]]:
    """Both models idle and with one busy process, each repetition timing all four."""
    runs = models.runs()
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.reps):
        for state in ("idle", "busy"):
            with busy_process() if state == "busy" else contextlib.nullcontext():
                for label, seconds in median_times(runs, 1).items():
                    times.setdefault((label, state), []).append(seconds)
    speed = {key: models.tokens / statistics.median(values) for key, values in times.items()}
    print(f"({models.name}) with one busy process (median of {args.reps}), tokens/s idle -> busy:")
    for label in models.steps:
        idle, busy = speed[label, "idle"], speed[label, "busy"]
        print(f"    {label:15s} {idle:8.0f} -> {busy:8.0f}  ({100 * busy / idle:.0f} % kept)")
    name = variant(models.name, args)
    return [
        (f"train_contention_keep_{name}", speed["ours", "busy"] / speed["ours", "idle"]),
        (f"train_contention_vs_twin_{name}", speed["ours", "busy"] / speed["nn.Transformer", "busy"]),
    ]


def main() -> None:
    args, dtype, data, goals = step_bench(__doc__, TARGETS)
    for size in args.sizes:
        print_ratios(bench_contention(twins(size, args, data, dtype), args), goals)


if __name__ == "__main__":
    main()
