"""Decoding with the KV cache against re-running the decoder over the whole prefix, and how a cached
step's cost grows with the output length.

Greedy search over a batch of real sentences (``bench/lib/decoders.py``, random weights) at forced output
lengths 16/32/64/128 (EOS is banned until the limit, so every sentence takes every step), cached and
with the full recomputation, repetitions interleaved, medians. Run it on an otherwise idle machine:
it keeps OpenMP's default wait policy, whose spinning threads stall badly when another process takes
their core.

    python -m bench.decode.cache [--size small_postnorm] [--reps 3] [--device cuda] [--dtype bf16]
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.lib.decoders import add_model_arguments, forced, random_model
from bench.lib.measure import bench_parser, median_times, ratio_line, target_for, targets
from seq2seq.decoding import generate, greedy_search
from seq2seq.machine.hardware import describe
from seq2seq.model import Transformer

LENGTHS = (16, 32, 64, 128)
TARGETS = {
    "decode_cached_speedup": 4,  # the cache at least this many times faster at the longest length
    "decode_per_token_growth": 1.5,  # a cached step at the longest length over one at the shortest, at most
}


def bench_cache(model: Transformer, src: torch.Tensor, reps: int) -> dict[str, float]:
    """Greedy, cached and fully recomputed, at each forced length; the speed-up and the growth."""
    runs: dict[str, Callable[[], object]] = {}
    for length in LENGTHS:
        runs[f"cached {length}"] = lambda n=length: greedy_search(model, src, forced(n))
        runs[f"full {length}"] = lambda n=length: greedy_search(model, src, forced(n), cached=False)
    times = median_times(runs, reps)
    print(f"greedy, batch {src.size(0)}: KV cache vs full recomputation (median of {reps})")
    for length in LENGTHS:
        cached, full = times[f"cached {length}"], times[f"full {length}"]
        print(
            f"  len {length:4d}: cached {cached:7.3f}s ({1e3 * cached / length:6.2f} ms/step)   "
            f"full {full:8.3f}s ({1e3 * full / length:7.2f} ms/step)   speedup {full / cached:5.1f}x"
        )
    first, last = LENGTHS[0], LENGTHS[-1]
    growth = (times[f"cached {last}"] / last) / (times[f"cached {first}"] / first)
    return {
        f"decode_cached_speedup_{last}": times[f"full {last}"] / times[f"cached {last}"],
        f"decode_per_token_growth_{first}_to_{last}": growth,
    }


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    add_model_arguments(parser)
    args = parser.parse_args()
    print(describe())
    setup = random_model(args)
    generate(setup.model, setup.src, forced(8, beam=2))  # warm-up: thread pool, allocator, kernel selection
    goals = targets(args)
    for name, value in bench_cache(setup.model, setup.src, args.reps).items():
        print(ratio_line(f"{name}{setup.suffix}", value, target_for(name, goals)))


if __name__ == "__main__":
    main()
