"""The beam's length penalty chosen on the validation split, checked on the test split (issue #27).

Decodes the checkpoint's validation sources with beam search once per GNMT alpha of the grid
(score / ((5 + L) / 6)^alpha; 0 = raw log-probability), picks the alpha with the best validation
BLEU, and scores the test split with it and with the checkpoint's own alpha. Float32 on both
splits, so the figures do not depend on the CPU. No training: one trained checkpoint is enough.

    python bench/length_penalty.py --ckpt runs/<date>/checkpoints/best.ckpt [--beam 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from seq2seq.checkpoint import load_model  # noqa: E402
from seq2seq.data import corpus  # noqa: E402
from seq2seq.hardware import describe  # noqa: E402
from seq2seq.inference.backends import open_model  # noqa: E402
from seq2seq.inference.evaluation import score  # noqa: E402
from seq2seq.inference.translator import TranslatorBase  # noqa: E402

GRID = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 2.0)


@dataclass
class Scored:
    """One decode of a split: the alpha, corpus BLEU/chrF over all references, and its seconds."""

    alpha: float
    bleu: float
    chrf: float
    seconds: float

    def line(self) -> str:
        return f"alpha {self.alpha:.1f}: BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  ({self.seconds:.1f} s)"


def decode_split(
    translator: TranslatorBase, sources: list[str], references: list[list[str]], alpha: float, beam: int
) -> Scored:
    settings = replace(translator.decode_cfg, beam_size=beam, nbest=1, length_penalty=alpha)
    start = time.perf_counter()
    hypotheses = [best.text for best, *_ in translator.translate(sources, settings)]
    seconds = time.perf_counter() - start
    scores = score(hypotheses, references)
    return Scored(alpha, scores["bleu"], scores["chrf"], seconds)


def held_out_test(ckpt: Path) -> tuple[list[str], list[list[str]]]:
    """Sources and references of the test split the checkpoint's data settings give."""
    splits, _ = corpus.load_splits(load_model(ckpt).data_config)
    return corpus.references(splits["test"])


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
    args = parser.parse_args()
    print(describe())
    on_valid, chosen, own = study(args.ckpt, args.beam)
    for scored in on_valid:
        print(f"valid  {scored.line()}")
    for label, scored in (("chosen on valid", chosen), ("the checkpoint's", own)):
        print(f"test   {scored.line()}  <- {label}")
    print(f"RATIO length_penalty_test_bleu_gain {chosen.bleu - own.bleu:.3f} target 0")


if __name__ == "__main__":
    main()
