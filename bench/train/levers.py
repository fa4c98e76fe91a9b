"""Lever study: train a variant next to today's default on the same budget and compare.

Each run is ``train.py`` as a user starts it, plus the lever's overrides and the budget: a fixed
number of steps (``--steps 962``: the slow machine class, insensitive to a busy machine; a lever
that changes the batch gets as many training tokens) or wall clock (``--minutes 30``). For every
run it reports steps, median training tokens/s, the best validation BLEU (greedy, as training
validates), and test BLEU and decode seconds with beam 5 and greedy on ``best.ckpt`` (float32, so
the figures do not hang on the CPU's bf16). A run's figures are kept in its directory
(``result.json``), so the default is trained once per budget and seed, however many levers are
compared with it; once a default changes, give the next study its own ``--out``. The decode
speed-up it prints times both best checkpoints again, interleaved in this process, as the runs' own
seconds may come from hours of different load. With ``--parallel 2`` a step budget's runs train two
at a time on half the cores each (more runs per hour on a small machine); every run is evaluated
alone once all have trained.

    python -m bench.train.levers --lever half_batch [pre_norm ...] --steps 962 [--seeds 42 43] [--parallel 2]
    python -m bench.train.levers --lever lr_3e-3_warmup_50=optim.lr=3e-3,optim.warmup_steps=50 --minutes 30
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bench.lib.measure import (
    ROOT,
    add_target_option,
    decode_split,
    held_out_test,
    ratio_line,
    target_for,
    targets,
)
from seq2seq.formats.checkpoint import read_checkpoint
from seq2seq.inference.backends import open_model
from seq2seq.machine.hardware import describe, threads_each


@dataclass(frozen=True)
class Lever:
    """A variant's overrides, and how many of its steps stand for one default step in a step budget:
    2 for half the batch, so that both see as many training tokens."""

    overrides: tuple[str, ...] = ()
    steps_per_default_step: float = 1.0


LEVERS = {
    "default": Lever(),
    "half_batch": Lever(("data.max_tokens=1250",), steps_per_default_step=2.0),
    "quarter_batch": Lever(("data.max_tokens=625",), steps_per_default_step=4.0),
    "lr_1e-3": Lever(("optim.lr=1e-3",)),
    "lr_2e-3": Lever(("optim.lr=2e-3",)),
    "vocab_4k": Lever(("data.vocab_size=4000",)),
    "vocab_6k": Lever(("data.vocab_size=6000",)),
    "depth_4_2": Lever(("model.n_encoder_layers=4", "model.n_decoder_layers=2")),
    "depth_5_1": Lever(("model.n_encoder_layers=5", "model.n_decoder_layers=1")),
    "depth_6_1": Lever(("model.n_encoder_layers=6", "model.n_decoder_layers=1")),
    # a deep post-norm stack did not train at this LR and warm-up; pre-norm keeps it stable
    "depth_6_1_pre_norm_lr_2e-3": Lever(
        ("model.n_encoder_layers=6", "model.n_decoder_layers=1", "model.norm_first=true", "optim.lr=2e-3")
    ),
    "gelu": Lever(("model.activation=gelu",)),
    "swiglu": Lever(("model.activation=swiglu", "model.d_ff=683")),  # as many FFN parameters as ReLU's 1024
    "raw_weights": Lever(("optim.ema_decay=0",)),
    "pre_norm": Lever(("model.norm_first=true",)),  # the default of spa_en_cpu since this study
    "post_norm": Lever(("model.norm_first=false",)),  # the default before it
    # wider at the default's FFN ratio (SwiGLU d_ff = 2.67 d_model): 15.5 M and 26.2 M parameters
    "width_384": Lever(("model.d_model=384", "model.d_ff=1024")),
    "width_512": Lever(("model.d_model=512", "model.d_ff=1365")),
    "no_label_smoothing": Lever(("optim.label_smoothing=0",)),
    "label_smoothing_0.2": Lever(("optim.label_smoothing=0.2",)),
    "muon": Lever(("optim.optimizer=muon",)),
    "cooldown_1_sqrt": Lever(("optim.decay_shape=1-sqrt",)),
    "warmup_50": Lever(("optim.warmup_steps=50",)),
    "qk_norm": Lever(("model.qk_norm=true",)),
    # the rate that lost 7 BLEU without QK-norm (round 4), which is said to make high rates stable
    "qk_norm_lr_3e-3_warmup_50": Lever(("model.qk_norm=true", "optim.lr=3e-3", "optim.warmup_steps=50")),
}


def parse_lever(spec: str) -> tuple[str, Lever]:
    """A lever by its name in :data:`LEVERS`, or one made on the command line as
    ``NAME=KEY=VALUE[,KEY=VALUE...]`` (commas inside ``[...]`` belong to a list value)."""
    if spec in LEVERS:
        return spec, LEVERS[spec]
    name, _, overrides = spec.partition("=")
    if not overrides or "=" not in overrides or name == "default":
        raise argparse.ArgumentTypeError(
            f"{spec!r}: give one of {', '.join(sorted(LEVERS))}, or NAME=KEY=VALUE[,KEY=VALUE...]"
        )
    return name, Lever(tuple(re.split(r",(?![^\[]*\])", overrides)))


SEARCHES = {"beam5": 5, "greedy": 1}
TARGETS = {  # by figure: the RATIO lines are lever_<NAME>_<figure>
    "test_bleu_gain": 2,  # the lever's test BLEU (beam 5) over the default's, mean over the seeds
    "beam5_decode_speedup": 1.5,  # the default's beam-5 seconds on the test split over the lever's
}
Budget = tuple[int | None, int | None]  # (steps of the default, minutes): one of them is set


def budget_overrides(lever: Lever, steps: int | None, minutes: int | None) -> list[str]:
    if steps is not None:
        return [f"trainer.max_steps={round(steps * lever.steps_per_default_step)}", "trainer.max_time=null"]
    return [f"trainer.max_time=00:00:{minutes:02d}:00"]


def median_tokens_per_s(run_dir: Path) -> float | None:
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    if "train/tokens_per_s" not in events.Tags()["scalars"]:
        return None
    return statistics.median(event.value for event in events.Scalars("train/tokens_per_s"))


def evaluate(run_dir: Path) -> dict:
    """The run's figures: steps, tokens/s, best validation BLEU, and the test split per search."""
    best = run_dir / "checkpoints" / "best.ckpt"
    state = read_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    translator = open_model(best, device="cpu", dtype="float32").translator
    test = held_out_test(best)
    result = {
        "steps": state["global_step"],
        "tokens_per_s": median_tokens_per_s(run_dir),
        "val_bleu": read_checkpoint(best)["seq2seq"]["best_bleu"],
    }
    for name, beam in SEARCHES.items():
        scored = decode_split(translator, *test, translator.decode_cfg.length_penalty, beam)
        result[f"test_bleu_{name}"], result[f"decode_s_{name}"] = scored.bleu, scored.seconds
    return result


def beam5_speedup(default_dir: Path, variant_dir: Path, repeats: int = 2) -> float:
    """Default's beam-5 seconds over the variant's on the test split, timed now and interleaved (the
    fastest of ``repeats`` each), since the runs' own timings may come from a busier hour."""
    translators = [
        open_model(run_dir / "checkpoints" / "best.ckpt", device="cpu", dtype="float32").translator
        for run_dir in (default_dir, variant_dir)
    ]
    test = held_out_test(default_dir / "checkpoints" / "best.ckpt")
    seconds: list[list[float]] = [[], []]
    for _ in range(repeats):
        for times, translator in zip(seconds, translators, strict=True):
            times.append(decode_split(translator, *test, translator.decode_cfg.length_penalty, 5).seconds)
    default, variant = min(seconds[0]), min(seconds[1])
    print(f"beam 5 on the test split, interleaved: default {default:.1f} s, variant {variant:.1f} s")
    return default / variant


def run_overrides(lever: Lever, seed: int, budget: Budget, extra: list[str], run_dir: Path) -> list[str]:
    return [
        *lever.overrides,
        *budget_overrides(lever, *budget),
        *extra,
        f"seed={seed}",
        f"hydra.run.dir={run_dir}",
    ]


def trained(run_dir: Path) -> bool:
    return (run_dir / "trained.json").is_file() or (run_dir / "result.json").is_file()


def train_runs(runs: dict[Path, list[str]], parallel: int) -> None:
    """Train the runs ``parallel`` at a time, each on its share of the cores; a finished run writes
    ``trained.json``, so a run that was stopped is trained again from the start, a trained one never.

    Two 1-thread trainings on 2 cores got through 1.33x the steps of one 2-thread training (no record
    keeps that measurement);
    their tokens/s then stand for a shared machine, and the table says so.
    """
    pending = [(run_dir, overrides) for run_dir, overrides in runs.items() if not trained(run_dir)]
    for start in range(0, len(pending), parallel):
        group = pending[start : start + parallel]
        env = dict(os.environ)
        if len(group) > 1:  # a run left alone keeps every core, as train.py would
            env["OMP_NUM_THREADS"] = str(threads_each(len(group)))
        jobs = [
            subprocess.Popen([sys.executable, "train.py", *overrides], cwd=ROOT, env=env)
            for _, overrides in group
        ]
        failed = []
        for (run_dir, overrides), job in zip(group, jobs, strict=True):  # every job ends before any error
            if job.wait() == 0:
                (run_dir / "trained.json").write_text(
                    json.dumps({"overrides": overrides, "parallel": len(group)})
                )
            else:
                failed.append(f"{run_dir.name} (exit {job.returncode}; see {run_dir}/train.log)")
        if failed:
            raise SystemExit(f"training failed: {', '.join(failed)}")


def result_of(name: str, seed: int, run_dir: Path) -> dict:
    """The run's figures, evaluated once (alone, after every training has finished) and kept."""
    record = run_dir / "result.json"
    if not record.is_file():
        training = json.loads((run_dir / "trained.json").read_text())
        record.write_text(
            json.dumps({"lever": name, "seed": seed, **training, **evaluate(run_dir)}, indent=1)
        )
    return json.loads(record.read_text())


COLUMNS = ("lever", "budget", "seed", "steps", "tokens/s", "val BLEU (greedy)",
           "test BLEU beam 5", "beam 5 s", "test BLEU greedy", "greedy s")  # fmt: skip
TABLE_HEADER = "| " + " | ".join(COLUMNS) + " |\n" + "|---" * len(COLUMNS) + "|"


def row(result: dict, budget_name: str) -> str:
    """One line of the lever tables of docs/results.md."""
    tokens, parallel = result["tokens_per_s"], result.get("parallel", 1)
    speed = "-" if tokens is None else f"{tokens:,.0f}" + (f" ({parallel} at once)" if parallel > 1 else "")
    cells = [
        result["lever"], budget_name, result["seed"], f"{result['steps']:,}", speed,
        f"{result['val_bleu']:.2f}",
        f"{result['test_bleu_beam5']:.2f}", f"{result['decode_s_beam5']:.1f}",
        f"{result['test_bleu_greedy']:.2f}", f"{result['decode_s_greedy']:.1f}",
    ]  # fmt: skip
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lever",
        type=parse_lever,
        nargs="+",
        required=True,
        help="each next to the default: a name of LEVERS, or NAME=KEY=VALUE[,KEY=VALUE...]",
    )
    budget = parser.add_mutually_exclusive_group(required=True)
    budget.add_argument("--steps", type=int, help="a fixed number of optimizer steps (962: the slow class)")
    budget.add_argument("--minutes", type=int, help="wall clock, as python train.py runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "levers")
    parser.add_argument("--experiment", help="instead of the default experiment (the tests: tiny)")
    parser.add_argument(
        "--parallel", type=int, default=1, help="train this many runs at once, each on its share of the cores"
    )
    add_target_option(parser, TARGETS)
    args = parser.parse_args()
    goals = targets(args)
    print(describe())
    extra = [f"experiment={args.experiment}"] if args.experiment else []
    budget = (args.steps, args.minutes)
    budget_name = f"{args.steps}steps" if args.steps is not None else f"{args.minutes}min"
    out = args.out / f"{args.experiment or 'spa_en_cpu'}-{budget_name}"
    if args.parallel > 1 and args.minutes is not None:
        parser.error("--parallel shares the cores: a wall-clock budget would no longer be the user's")
    levers = {"default": LEVERS["default"], **dict(args.lever)}
    dirs = {(lever, seed): out / f"{lever}-seed{seed}" for seed in args.seeds for lever in levers}
    train_runs(
        {
            run_dir: run_overrides(levers[lever], seed, budget, extra, run_dir)
            for (lever, seed), run_dir in dirs.items()
        },
        args.parallel,
    )
    results = {(lever, seed): result_of(lever, seed, run_dir) for (lever, seed), run_dir in dirs.items()}
    print(TABLE_HEADER)
    for result in results.values():
        print(row(result, budget_name))
    for lever, _ in args.lever:
        variant = [results[lever, seed] for seed in args.seeds]
        default = [results["default", seed] for seed in args.seeds]
        gains = [v["test_bleu_beam5"] - d["test_bleu_beam5"] for v, d in zip(variant, default, strict=True)]
        speed = beam5_speedup(out / f"default-seed{args.seeds[0]}", out / f"{lever}-seed{args.seeds[0]}")
        for figure, value in (("test_bleu_gain", statistics.mean(gains)), ("beam5_decode_speedup", speed)):
            print(ratio_line(f"lever_{lever}_{figure}", value, target_for(figure, goals), digits=3))


if __name__ == "__main__":
    main()
