"""The beam's length penalty chosen on the validation split, checked on the test split.

Decodes the checkpoint's validation sources with beam search once per GNMT alpha of the grid
(score / ((5 + L) / 6)^alpha; 0 = raw log-probability), picks the alpha with the best validation
BLEU, and scores the test split with it and with the checkpoint's own alpha. Float32 on both
splits, so the figures do not depend on the CPU. No training: one trained checkpoint is enough.

    python -m bench.decode.length_penalty --ckpt runs/<date>/checkpoints/best.ckpt [--beam 5]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.lib.measure import Scored, add_target_option, decode_split, ratio_line, target_for, targets
from seq2seq.data import corpus
from seq2seq.inference.backends import open_model
from seq2seq.machine.hardware import describe

GRID = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 2.0)
TARGETS = {"length_penalty_test_bleu_gain": 0}  # the alpha chosen on validation no worse on test


def study(ckpt: Path, beam: int, grid: tuple[float, ...] = GRID) -> tuple[list[Scored], Scored, Scored]:
    """Validation scores over ``grid``, then the test scores of the chosen alpha and of the checkpoint's."""
    translator, facts, _ = open_model(ckpt, device="cpu", dtype="float32")
    splits, _ = corpus.load_splits(facts.data_config)
    valid, test = corpus.references(splits["valid"]), corpus.references(splits["test"])
    on_valid = [decode_split(translator, *valid, alpha, beam) for alpha in grid]
    chosen = max(on_valid, key=lambda scored: scored.bleu)
    own = translator.decode_cfg.length_penalty
    return (
        on_valid,
        decode_split(translator, *test, chosen.alpha, beam),
        decode_split(translator, *test, own, beam),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", type=Path, required=True)
    parser.add_argument("--beam", type=int, default=5)
    add_target_option(parser, TARGETS)
    args = parser.parse_args()
    print(describe())
    on_valid, chosen, own = study(args.ckpt, args.beam)
    for scored in on_valid:
        print(f"valid  {scored.line()}")
    for label, scored in (("chosen on valid", chosen), ("the checkpoint's", own)):
        print(f"test   {scored.line()}  <- {label}")
    name = "length_penalty_test_bleu_gain"
    print(ratio_line(name, chosen.bleu - own.bleu, target_for(name, targets(args)), digits=3))


if __name__ == "__main__":
    main()
