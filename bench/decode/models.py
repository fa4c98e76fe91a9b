"""Two trained models end to end: a model's decoding speed and BLEU against a baseline model's.

Beam 5 and greedy over the model's (``--ckpt``) held-out test split in float32, the model and the
baseline (``--baseline-ckpt``, e.g. the previous default run's checkpoint) interleaved, medians of
``--reps``; the baseline's seconds over the model's, and the model's BLEU gain.

    python -m bench.decode.models --ckpt new.ckpt --baseline-ckpt old.ckpt [--reps 3]
"""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.lib.measure import (
    bench_parser,
    decode_split,
    held_out_test,
    print_ratios,
    targets,
)
from seq2seq.inference.backends import open_model
from seq2seq.machine.hardware import describe

TARGETS = {
    "model_vs_baseline_beam5_speedup": 1.5,  # the model decodes at least this many times faster
    "model_vs_baseline_greedy_speedup": 1.5,
    "model_vs_baseline_beam5_bleu_gain": 0,  # ... at equal or better BLEU
    "model_vs_baseline_greedy_bleu_gain": 0,
}


def bench_models(baseline_ckpt: str, ckpt: str, reps: int) -> dict[str, float]:
    """The baseline's seconds over the model's (beam 5, greedy) and the model's BLEU gain, on the
    model's test split in float32; repetitions interleaved, medians."""
    translators = {
        name: open_model(path, device="cpu", dtype="float32").translator
        for name, path in (("baseline", baseline_ckpt), ("model", ckpt))
    }
    sources, references = held_out_test(Path(ckpt))
    ratios = {}
    for search, beam in (("beam5", 5), ("greedy", 1)):
        seconds: dict[str, list[float]] = {name: [] for name in translators}
        bleu = {}
        for _ in range(reps):
            for name, translator in translators.items():
                scored = decode_split(
                    translator, sources, references, translator.decode_cfg.length_penalty, beam
                )
                seconds[name].append(scored.seconds)
                bleu[name] = scored.bleu
        median = {name: statistics.median(times) for name, times in seconds.items()}
        print(
            f"{search}, {len(sources)} test sentences: "
            + ", ".join(f"{name} {median[name]:.2f}s BLEU {bleu[name]:.2f}" for name in translators)
        )
        ratios[f"model_vs_baseline_{search}_speedup"] = median["baseline"] / median["model"]
        ratios[f"model_vs_baseline_{search}_bleu_gain"] = bleu["model"] - bleu["baseline"]
    return ratios


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    parser.add_argument("--ckpt", required=True, help="the trained model, whose test split is decoded")
    parser.add_argument("--baseline-ckpt", required=True, help="the trained model it is compared with")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions of each model")
    args = parser.parse_args()
    print(describe())
    goals = targets(args)
    print_ratios(bench_models(args.baseline_ckpt, args.ckpt, args.reps).items(), goals)


if __name__ == "__main__":
    main()
