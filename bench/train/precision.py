"""The precision ``trainer.precision=auto`` picks on this machine against the faster of fp32 and bf16.

``auto`` is resolved as training resolves it; then our step (``bench/lib/training_step.py``) on the same real
batches in fp32, in bf16 and in the precision ``auto`` chose (fp16 where it chose it: CUDA compute
capability 7.x), repetitions interleaved. The ratio is the fastest precision's time over the chosen
one's: 1 where ``auto`` picks the fastest.

    python -m bench.train.precision [--sizes small_postnorm base] [--device cpu|cuda] [--reps 3]
"""

from __future__ import annotations

import seq2seq.machine.threads  # noqa: F401  (OpenMP's wait policy as in training: before torch loads)

# isort: split

import torch

from bench.lib.measure import bench_parser, median_times, ratio_line, target_for, targets
from bench.lib.training_step import (
    Twins,
    add_step_arguments,
    corpus_data,
    ours_loss,
    start,
    train_step_fn,
    twins,
)

TARGETS = {"train_auto_vs_best_precision": 0.95}  # auto's pick at least this share of the fastest's speed


def bench_precisions(models: Twins, chosen: torch.dtype, reps: int) -> float:
    """The fastest precision's time over the time of the one ``auto`` chose, ours, interleaved."""
    dtypes = dict.fromkeys((torch.float32, torch.bfloat16, chosen))
    steps = {dtype: train_step_fn(models.ours, ours_loss, dtype) for dtype in dtypes}
    for step in steps.values():
        step(models.batches[0])
    runs = {dtype: (lambda s=step: [s(b) for b in models.batches]) for dtype, step in steps.items()}
    times = median_times(runs, reps)
    print(
        f"({models.name}) ours by precision: "
        + ", ".join(f"{dtype} {seconds:.2f} s" for dtype, seconds in times.items())
    )
    return min(times.values()) / times[chosen]


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    add_step_arguments(parser, dtypes=())
    args = parser.parse_args()
    args.dtype = "auto"
    chosen = start(args)
    data = corpus_data(args)
    goals = targets(args)
    on_gpu = "_cuda" if args.device.type == "cuda" else ""
    for size in args.sizes:
        name = f"train_auto_vs_best_precision_{size}{on_gpu}"
        value = bench_precisions(twins(size, args, data, chosen), chosen, args.reps)
        print(ratio_line(name, value, target_for(name, goals)))


if __name__ == "__main__":
    main()
