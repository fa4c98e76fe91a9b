"""An ensemble of checkpoints against each of its members, on the first checkpoint's test split.

Each member alone and the ensemble of all (``open_model`` with several checkpoints: their
log-probabilities averaged at each step) are built in this process and warmed up (200 sentences);
then the whole test split is decoded greedily and with beam 5, repetitions interleaved. The ratios:
the ensemble's BLEU over the best member's (``ensemble_bleu_gain_*``, in BLEU points) and its
seconds over the members' mean (``ensemble_seconds_over_member_*``: an ensemble of N runs N models a
step, so about N is what it should cost). ``--record NAME`` writes docs/records/NAME.json.

    python -m bench.decode.ensemble --ckpts run/checkpoints/best.ckpt run/checkpoints/last.ckpt
    python -m bench.decode.ensemble --ckpts seed1/best.ckpt seed2/best.ckpt --record ensemble-two-seeds
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench.lib.measure import (
    RECORDS,
    bench_parser,
    held_out_test,
    machine,
    print_ratios,
    table_record,
    targets,
    write_record,
)
from seq2seq.inference.backends import open_model
from seq2seq.inference.evaluation import score
from seq2seq.inference.translator import TranslatorBase
from seq2seq.machine.hardware import describe

ENSEMBLE = "ensemble of all"  # the row of all checkpoints together
TARGETS = {
    "ensemble_bleu_gain_": 0.5,  # the ensemble at least this many BLEU points above its best member
    "ensemble_seconds_over_member_": 2.2,  # ... at most this times a member's seconds (two members)
}
HEADER = ["decoder", "greedy, s", "beam 5, s", "greedy BLEU", "beam 5 BLEU"]
SEARCHES = (("greedy", 1), ("beam5", 5))


def translators(ckpts: list[str], dtype: str) -> dict[str, TranslatorBase]:
    """Each checkpoint alone, by its path, then the ensemble of all of them."""
    built = {ckpt: open_model(ckpt, device="cpu", dtype=dtype).translator for ckpt in ckpts}
    built[ENSEMBLE] = open_model(ckpts, device="cpu", dtype=dtype).translator
    return built


def decode_all(
    built: dict[str, TranslatorBase], sources: list[str], references: list[list[str]], reps: int
) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], float]]:
    """The fastest seconds and the BLEU of each translator and beam, after a warm-up."""
    for translator in built.values():
        list(translator.translate(sources[:200], replace(translator.decode_cfg, beam_size=5, nbest=1)))
    seconds: dict[tuple[str, int], list[float]] = {}
    bleu: dict[tuple[str, int], float] = {}
    for _ in range(reps):
        for (name, translator), (_, beam) in itertools.product(built.items(), SEARCHES):
            settings = replace(translator.decode_cfg, beam_size=beam, nbest=1)
            start = time.perf_counter()
            lines = [best.text for best, *_ in translator.translate(sources, settings)]
            seconds.setdefault((name, beam), []).append(time.perf_counter() - start)
            bleu[name, beam] = score(lines, references)["bleu"]
    return {key: min(times) for key, times in seconds.items()}, bleu


def ratios_of(
    members: list[str], fastest: dict[tuple[str, int], float], bleu: dict[tuple[str, int], float]
) -> dict[str, float]:
    """Per search: the ensemble's BLEU gain over its best member, and its seconds over theirs."""
    ratios = {}
    for search, beam in SEARCHES:
        ratios[f"ensemble_bleu_gain_{search}"] = bleu[ENSEMBLE, beam] - max(bleu[m, beam] for m in members)
        member_seconds = sum(fastest[m, beam] for m in members) / len(members)
        ratios[f"ensemble_seconds_over_member_{search}"] = fastest[ENSEMBLE, beam] / member_seconds
    return ratios


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    parser.add_argument("--ckpts", nargs="+", required=True, help="two or more checkpoints of one tokenizer")
    parser.add_argument("--dtype", default="float32", help="every model's compute type (default float32)")
    parser.add_argument("--reps", type=int, default=1, help="timed repetitions of each decoder")
    parser.add_argument("--limit", type=int, help="only the first N test sentences")
    parser.add_argument("--record", metavar="NAME", help="write docs/records/NAME.json")
    args = parser.parse_args()
    if len(args.ckpts) < 2:
        parser.error("--ckpts: an ensemble needs two or more checkpoints")
    for ckpt in args.ckpts:
        if not Path(ckpt).is_file():
            parser.error(f"--ckpts: {ckpt} is not a file")
    hardware = describe()
    print(hardware)
    sources, references = held_out_test(Path(args.ckpts[0]))
    sources, references = sources[: args.limit], references[: args.limit]
    built = translators(args.ckpts, args.dtype)
    fastest, bleu = decode_all(built, sources, references, args.reps)
    labels = {ckpt: f"member {number}: {ckpt}" for number, ckpt in enumerate(args.ckpts, 1)}
    rows = [
        [labels.get(name, name), *(f"{fastest[name, beam]:.2f}" for beam in (1, 5))]
        + [f"{bleu[name, beam]:.2f}" for beam in (1, 5)]
        for name in built
    ]
    for row in rows:
        print("  " + " | ".join(row))
    ratios = ratios_of(args.ckpts, fastest, bleu)
    goals = targets(args)
    print_ratios(ratios.items(), goals, digits=3)
    if args.record:
        notes = (
            f"python -m bench.decode.ensemble --ckpts {' '.join(args.ckpts)} --dtype {args.dtype} "
            f"--reps {args.reps}: {len(sources)} test sentences, each decoder warmed up in one process, "
            f"repetitions interleaved, the fastest; {torch.get_num_threads()} threads. {hardware}"
        )
        path = RECORDS / f"{args.record}.json"
        write_record(path, table_record(args.record, machine(), notes, HEADER, rows, ratios))
        print(f"record: {path}")


if __name__ == "__main__":
    main()
