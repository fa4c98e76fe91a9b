"""Training-step cost per token at length 64 against length 16: how the step grows with sentence length.

Real text cut into rows of exactly 16 and of exactly 64 tokens (no padding), the same number of
tokens a side, through our step (``bench/lib/training_step.py``); repetitions interleaved, medians. The ratio
is the step time at 64 over the time at 16: 1 where attention's quadratic part costs nothing.

    python -m bench.train.step_lengths [--sizes small_postnorm base] [--dtype fp32|bf16|auto]
                                       [--compile] [--device cpu|cuda] [--max-tokens 2500]
"""

from __future__ import annotations

import seq2seq.machine.threads  # noqa: F401  (OpenMP's wait policy as in training: before torch loads)

# isort: split
import argparse

import torch

from bench.lib.measure import (
    median_times,
    model_config,
    ratio_line,
    target_for,
)
from bench.lib.training_step import (
    VOCAB,
    Data,
    fixed_length_batch,
    ours_loss,
    step_bench,
    train_step_fn,
    variant,
)
from seq2seq.model import Transformer

TARGETS = {"train_time_per_token_len64_vs_len16": 1.25}  # a step at length 64 at most this many times 16's


def bench_lengths(name: str, args: argparse.Namespace, data: Data, dtype: torch.dtype) -> float:
    """Our step time at length 64 over length 16, the same number of tokens."""
    torch.manual_seed(0)
    model = Transformer(model_config(name), VOCAB, VOCAB).to(args.device)
    if args.compile:
        model.compile(dynamic=True)
    step = train_step_fn(model, ours_loss, dtype)
    by_length = {
        length: fixed_length_batch(data, length, args.max_tokens).to(args.device) for length in (16, 64)
    }
    for batch in by_length.values():
        step(batch)
    times = median_times({length: lambda b=batch: step(b) for length, batch in by_length.items()}, args.reps)
    print(
        f"({name}) ours, {args.max_tokens} tokens/side at length 16: {1e3 * times[16]:.0f} ms/step, "
        f"at length 64: {1e3 * times[64]:.0f} ms/step"
    )
    return times[64] / times[16]


def main() -> None:
    args, dtype, data, goals = step_bench(__doc__, TARGETS)
    for size in args.sizes:
        name = f"train_time_per_token_len64_vs_len16_{variant(size, args)}"
        print(ratio_line(name, bench_lengths(size, args, data, dtype), target_for(name, goals)))


if __name__ == "__main__":
    main()
