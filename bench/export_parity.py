"""How closely a CTranslate2 export follows its checkpoint, on the checkpoint's held-out test split.

Exports the checkpoint with float32 and int8 weights, decodes the test split greedily and with
beam 5 through the PyTorch ``Translator`` in float32 and through each export, and prints, per export and
search: the share of sentences with exactly the same output tokens as PyTorch, the largest score
difference on those, and corpus BLEU/chrF of each against all references.

    python bench/export_parity.py --ckpt runs/<date>/checkpoints/best.ckpt [--split test]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from seq2seq.checkpoint import load_model  # noqa: E402
from seq2seq.data import corpus  # noqa: E402
from seq2seq.decoding import Hypothesis  # noqa: E402
from seq2seq.export.to_ctranslate2 import export_checkpoint  # noqa: E402
from seq2seq.inference.ct2_translator import CT2Translator  # noqa: E402
from seq2seq.inference.evaluation import score  # noqa: E402
from seq2seq.inference.translator import Translator, TranslatorBase, token_budget_batches  # noqa: E402

SEARCHES = {"greedy": 1, "beam 5": 5}


def decode(translator: TranslatorBase, sources: list[list[int]], beam: int) -> tuple[list[Hypothesis], float]:
    """The best hypothesis of each encoded source, in order, and the seconds it took."""
    settings = translator.settings(beam=beam, nbest=1)
    best: list[Hypothesis] = [Hypothesis([], 0.0)] * len(sources)
    start = time.perf_counter()
    for batch in token_budget_batches(sources, translator.batch_tokens):
        for i, hypotheses in zip(
            batch, translator.search([sources[i] for i in batch], settings), strict=True
        ):
            best[i] = hypotheses[0]
    return best, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ckpt", required=True, help="checkpoint written by train.py")
    parser.add_argument("--split", choices=["test", "valid"], default="test")
    args = parser.parse_args()

    loaded = load_model(args.ckpt)
    ours = Translator(loaded.model, loaded.tokenizer, loaded.decode_config)
    splits, _ = corpus.load_splits(loaded.data_config)
    texts, references = corpus.references(splits[args.split])
    sources = ours.encode(texts)
    workdir = tempfile.TemporaryDirectory(prefix="export-parity-")
    engines = {
        q: CT2Translator(export_checkpoint(args.ckpt, Path(workdir.name) / q, q), device="cpu")
        for q in ("float32", "int8")
    }
    print(f"{args.ckpt}: {len(texts)} {args.split} sentences; reference side: {ours.compute}")
    for search, beam in SEARCHES.items():
        reference, seconds = decode(ours, sources, beam)
        report(f"pytorch {search}", ours, reference, reference, references, seconds)
        for quantization, engine in engines.items():
            got, seconds = decode(engine, sources, beam)
            report(f"ct2 {quantization} {search}", engine, got, reference, references, seconds)


def report(
    name: str,
    translator: TranslatorBase,
    got: list[Hypothesis],
    reference: list[Hypothesis],
    references: list[list[str]],
    seconds: float,
) -> None:
    same = [g.tokens == r.tokens for g, r in zip(got, reference, strict=True)]
    gap = max(
        (abs(g.score - r.score) for g, r, s in zip(got, reference, same, strict=True) if s), default=0.0
    )
    result = score(translator.tokenizer.decode_target([h.tokens for h in got]), references)
    print(
        f"  {name:22s} same tokens {100 * sum(same) / len(same):6.2f} %  max |Δscore| {gap:.2e}  "
        f"BLEU {result['bleu']:6.2f}  chrF {result['chrf']:6.2f}  ({seconds:.1f} s, {translator.compute})"
    )


if __name__ == "__main__":
    main()
