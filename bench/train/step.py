"""Training-step speed: our step against its ``torch.nn.Transformer`` twin, and model FLOPs utilisation.

For each size, both models (``bench/lib/training_step.py``) train on the same token-budget batches of real
sentence pairs, repetitions interleaved with a square matmul of the same dtype (the ceiling), medians
reported: tokens/s (source + target, pad excluded), and the same as GFLOP/s against the ceiling.
Like ``train.py``, it runs with OpenMP's passive wait policy (:mod:`seq2seq.machine.threads`).

``--device cuda`` trains on the GPU (bf16 autocast unless ``--dtype`` says otherwise, AdamW in
foreach mode as the module runs it there, the ceiling an 8192x8192 matmul); every timed region ends
with ``torch.cuda.synchronize()``.

``--capture`` pads the batches to static shapes and also times our step captured (``compile=true``
with ``data.static_shapes=true``) against ours eager on them.

    python -m bench.train.step [--sizes small_postnorm base] [--dtype fp32|bf16|auto]
                               [--compile | --capture] [--device cpu|cuda] [--max-tokens 2500]
"""

from __future__ import annotations

import seq2seq.machine.threads  # noqa: F401  (OpenMP's wait policy as in training: before torch loads)

# isort: split
import argparse

import torch

from bench.lib.measure import (
    median_times,
    print_ratios,
    square_matmul,
)
from bench.lib.training_step import Twins, step_bench, twins, variant

TARGETS = {
    "train_tokens_per_s_vs_nn_transformer": 1.15,  # ours at least this many times the twin's tokens/s
    "train_mfu": 0.60,  # our model FLOPs/s at least this share of the matmul ceiling
    "train_captured_speedup": 1.0,  # --capture: ours captured at least as fast as ours eager
}


def bench_size(models: Twins, args: argparse.Namespace, dtype: torch.dtype) -> list[tuple[str, float]]:
    """Both models' tokens/s and GFLOP/s against the ceiling timed with them; the two ratios."""
    runs = models.runs()
    runs["matmul"], matmul_flops, n = square_matmul(dtype, args.device)
    times = median_times(runs, args.reps)
    ceiling = matmul_flops / times.pop("matmul") / 1e9
    print(
        f"({models.name}) {len(models.batches)} real batches of ~{args.max_tokens} tokens/side "
        f"(median of {args.reps})"
    )
    print(f"  matmul ceiling ({n}x{n}, {dtype}): {ceiling:.0f} GFLOP/s")
    for label, seconds in times.items():
        achieved = models.flops / seconds / 1e9
        print(
            f"  {label:15s} {models.tokens / seconds:8.0f} tokens/s   {achieved:7.1f} GFLOP/s   "
            f"{100 * achieved / ceiling:5.1f}% of the matmul ceiling"
        )
    name = variant(models.name, args)
    ratios = [
        (f"train_tokens_per_s_vs_nn_transformer_{name}", times["nn.Transformer"] / times["ours"]),
        (f"train_mfu_{name}", models.flops / times["ours"] / 1e9 / ceiling),
    ]
    if "ours captured" in times:
        ratios.append((f"train_captured_speedup_{name}", times["ours"] / times["ours captured"]))
    return ratios


def main() -> None:
    args, dtype, data, goals = step_bench(__doc__, TARGETS)
    ratios = [
        ratio for name in args.sizes for ratio in bench_size(twins(name, args, data, dtype), args, dtype)
    ]
    print_ratios(ratios, goals)


if __name__ == "__main__":
    main()
