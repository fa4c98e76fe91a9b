"""The default recipe's real training loop, this working tree against the code at a baseline commit.

``train.py``'s Trainer, module, data module, EMA, logging and callbacks (``bench/lib/loop_run.py``) for
``--steps`` steps after ``--warmup``, this tree against the code at ``--baseline`` (extracted with
``git archive``): each run in its own process, repetitions alternating which goes first, medians of
tokens/s, and of tokens per CPU-second of the training process, which load from other processes
moves much less than wall time. Then our bare step of the same model (``bench/lib/training_step.py``) as a
share of the matmul ceiling of its precision, timed interleaved with it.

The baseline is by default the commit of a record in docs/records/ (``--baseline-record``: the
30-minute run of the training path before the step changes of docs/performance.md). The speed-up's
target follows the CPU's class (``--target`` replaces it).

    python -m bench.train.loop [--steps 30] [--warmup 5] [--reps 3] [--baseline REF] [--set K=V ...]
"""

from __future__ import annotations

import seq2seq.machine.threads  # noqa: F401  (OpenMP's wait policy as in training: before torch loads)

# isort: split
import argparse
import os
import statistics
from dataclasses import replace

import torch

from bench.lib.loop_run import code_at, compose_default, loop_in_subprocess
from bench.lib.measure import (
    ROOT,
    add_target_option,
    median_times,
    print_ratios,
    record_commit,
    square_matmul,
    targets,
)
from bench.lib.training_step import (
    VOCAB,
    Data,
    corpus_data,
    model_flops,
    ours_loss,
    real_batches,
    real_tokens,
    train_step_fn,
)
from seq2seq.config import ModelConfig, validated
from seq2seq.machine.hardware import Hardware, describe, detect, precision_dtype
from seq2seq.model import Transformer

BASELINE_RECORD = "zen1-before-step-changes-30min"  # the training path before the step changes
SPEEDUP_BY_CLASS = (("amx_bf16", 1.5), ("avx512_bf16", 1.3))  # the loop's speed-up target by CPU flag
SPEEDUP_AVX2, SPEEDUP_GPU = 1.15, 1.0  # on other CPUs; on a GPU no slower


def default_targets(hardware: Hardware) -> dict[str, float]:
    """The targets on this machine's class: the speed-up by CPU flags (no slower on a GPU)."""
    if hardware.gpu is not None:
        speedup = SPEEDUP_GPU
    else:
        speedup = next((target for flag, target in SPEEDUP_BY_CLASS if flag in hardware.flags), SPEEDUP_AVX2)
    return {
        "train_loop_speedup": speedup,  # tokens/s, and tokens per CPU-second
        "train_mfu_bare_step_bfloat16": 0.25,  # the bare step's share of the bf16 matmul ceiling
        "train_mfu_bare_step": 0.60,  # ... of the fp32 one
    }


def bench_loop(args: argparse.Namespace) -> tuple[float, float, str]:
    """Tokens/s and tokens per CPU-second of the real loop, this tree over ``--baseline``; the precision."""
    load = os.getloadavg()[0]
    print(
        f"the default recipe's training loop: {args.steps} steps after {args.warmup}, "
        f"{args.reps} runs of each version"
    )
    labels = (f"{args.baseline[:12]} (baseline)", "this tree")
    results: dict[str, list[dict]] = {label: [] for label in labels}
    with code_at(ROOT, args.baseline) as baseline:
        trees = dict(zip(labels, (baseline, ROOT), strict=True))
        for rep in range(args.reps):
            for label in labels[:: 1 if rep % 2 == 0 else -1]:  # which goes first alternates
                result = loop_in_subprocess(trees[label], args.steps, args.warmup, args.set)
                results[label].append(result)
                print(
                    f"  {label:24s} {result['tokens_per_s']:8.0f} tokens/s, "
                    f"{result['tokens_per_cpu_s']:6.0f} per CPU-second ({result['precision']})"
                )
    (old, new), (old_cpu, new_cpu) = (
        [statistics.median(r[key] for r in results[label]) for label in labels]
        for key in ("tokens_per_s", "tokens_per_cpu_s")
    )
    print(
        f"  median: {new:.0f} vs {old:.0f} tokens/s ({new / old:.3f}x); per CPU-second of the training "
        f"process, which other load moves less: {new_cpu:.0f} vs {old_cpu:.0f} ({new_cpu / old_cpu:.3f}x); "
        f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    return new / old, new_cpu / old_cpu, str(result["precision"])


def bench_bare_step(
    model_cfg: ModelConfig, args: argparse.Namespace, data: Data, dtype: torch.dtype
) -> float:
    """Our step of the default recipe's model (dropout off, as its budget sets it) over the matmul
    ceiling of ``dtype``, timed interleaved."""
    torch.manual_seed(0)
    model = Transformer(replace(model_cfg, dropout=0.0), VOCAB, VOCAB).to(args.device)
    batches = real_batches(data, args.max_tokens, args.batches)
    tokens = real_tokens(batches)
    flops = sum(model_flops(model_cfg, model, b) for b in batches)
    batches = [batch.to(args.device) for batch in batches]
    step = train_step_fn(model, ours_loss, dtype)
    for batch in batches[:2]:
        step(batch)
    runs = {"ours": lambda: [step(b) for b in batches]}
    runs["matmul"], matmul_flops, n = square_matmul(dtype, args.device)
    times = median_times(runs, args.reps)
    ceiling = matmul_flops / times["matmul"] / 1e9
    achieved = flops / times["ours"] / 1e9
    print(
        f"  bare step of that model, {dtype}: {tokens / times['ours']:.0f} tokens/s, {achieved:.1f} GFLOP/s, "
        f"{100 * achieved / ceiling:.1f} % of the {n}x{n} matmul ceiling ({ceiling:.0f} GFLOP/s)"
    )
    return achieved / ceiling


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=5, help="steps before the timed window")
    parser.add_argument("--reps", type=int, default=3, help="runs of each version")
    parser.add_argument(
        "--baseline", help="git ref of the code to compare with (default: --baseline-record's)"
    )
    parser.add_argument(
        "--baseline-record",
        default=BASELINE_RECORD,
        help="the record in docs/records/ whose commit is the baseline",
    )
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=VALUE", help="Hydra overrides of every run"
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the bare step runs")
    parser.add_argument("--max-tokens", type=int, default=2500, help="bare step: tokens per side per batch")
    parser.add_argument("--batches", type=int, default=4, help="bare step: real batches per repetition")
    hardware = detect()
    add_target_option(parser, default_targets(hardware))
    args = parser.parse_args()
    args.baseline = args.baseline or record_commit(args.baseline_record)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device cuda, but torch {torch.__version__} sees no CUDA GPU on this machine")
    args.device, args.dtype = torch.device(args.device), "fp32"
    torch.manual_seed(0)
    print(describe(hardware))
    speedup, per_cpu_second, precision = bench_loop(args)
    cfg = compose_default(args.set)
    dtype = precision_dtype(precision)
    mfu = bench_bare_step(validated(ModelConfig, cfg.model, "model"), args, corpus_data(args), dtype)
    goals = targets(args)
    ratios = {
        "train_loop_speedup": speedup,
        "train_loop_speedup_per_cpu_second": per_cpu_second,  # for a busy machine
        f"train_mfu_bare_step_{str(dtype).removeprefix('torch.')}": mfu,
    }
    print_ratios(ratios.items(), goals)


if __name__ == "__main__":
    main()
