"""How closely a CTranslate2 export follows its checkpoint, on the checkpoint's held-out test split.

Exports the checkpoint to CTranslate2 with float32 and int8 weights (and, with ``--transformers``,
to transformers), decodes the test split greedily and with beam 5 through the PyTorch ``Translator``
in float32 and through each export, and prints, per export and search: the share of sentences
with exactly the same output tokens as PyTorch, the largest score difference on those, and corpus
BLEU/chrF of each against all references. ``generate()`` rows are the transformers export called
as a user calls it, without ``translate.py``'s per-sentence limits and re-ranking; a last line
gives the largest float32 logit difference between PyTorch and the transformers export. The
export's class is the one ``python -m seq2seq.export`` chooses (Marian, Pegasus or seq2seq's own).

    python -m bench.decode.export_parity --ckpt runs/<date>/checkpoints/best.ckpt [--split test]
        [--transformers]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from seq2seq.config import DecodeConfig
from seq2seq.data import corpus
from seq2seq.data.batching import pad_ids
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.decoding import Hypothesis
from seq2seq.decoding.steps import output_limits
from seq2seq.export.to_ctranslate2 import export_checkpoint
from seq2seq.export.to_transformers import export_to_transformers
from seq2seq.inference.backends import open_model
from seq2seq.inference.evaluation import score
from seq2seq.inference.hf_translator import HFTranslator
from seq2seq.inference.translator import DEFAULT_BATCH_TOKENS, TranslatorBase, token_budget_batches

SEARCHES = {"greedy": 1, "beam 5": 5}
LOGIT_ROWS = 128  # test sentences in the logits comparison (one teacher-forced batch)


def decode(translator: TranslatorBase, sources: list[list[int]], beam: int) -> tuple[list[Hypothesis], float]:
    """The best hypothesis of each encoded source, in order, and the seconds it took."""
    settings = translator.decode_cfg_with(beam=beam, nbest=1)
    best: list[Hypothesis] = [Hypothesis([], 0.0)] * len(sources)
    start = time.perf_counter()
    for batch in token_budget_batches(sources, translator.batch_tokens):
        for i, hypotheses in zip(
            batch, translator.search([sources[i] for i in batch], settings), strict=True
        ):
            best[i] = hypotheses[0]
    return best, time.perf_counter() - start


def plain_generate(
    directory: Path, cfg: DecodeConfig, sources: list[list[int]], beam: int, batch_tokens: int
) -> tuple[list[Hypothesis], float]:
    """What a user of the transformers export gets: ``generate()`` on token-budget batches with the
    folder's own settings (transformers' length penalty, one length limit per call: the batch's
    largest), no re-ranking; scores are not comparable and stay 0."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    import seq2seq.hf  # noqa: F401  (registers seq2seq's own class, for the models Marian and Pegasus lack)

    model = AutoModelForSeq2SeqLM.from_pretrained(directory, trust_remote_code=False).eval()
    best: list[Hypothesis] = [Hypothesis([], 0.0)] * len(sources)
    start = time.perf_counter()
    for batch in token_budget_batches(sources, batch_tokens):
        src = pad_ids([sources[i] for i in batch])
        limit = int(output_limits(src, cfg, model.config.max_position_embeddings, PAD_ID).max())
        with torch.inference_mode():
            out = model.generate(
                input_ids=src, attention_mask=src != PAD_ID, num_beams=beam, max_new_tokens=limit
            )
        for i, row in zip(batch, out.tolist(), strict=True):
            tokens = row[1:]
            best[i] = Hypothesis(tokens[: tokens.index(EOS_ID)] if EOS_ID in tokens else tokens, 0.0)
    return best, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ckpt", required=True, help="checkpoint written by train.py")
    parser.add_argument("--split", choices=["test", "valid"], default="test")
    parser.add_argument(
        "--transformers", action="store_true", help="also the transformers export (needs .[hf])"
    )
    args = parser.parse_args()

    ours, facts, _ = open_model(args.ckpt, device="cpu", batch_tokens=DEFAULT_BATCH_TOKENS, dtype="float32")
    splits, _ = corpus.load_splits(facts.data_config)
    texts, references = corpus.references(splits[args.split])
    sources = ours.encode(texts)
    workdir = tempfile.TemporaryDirectory(prefix="export-parity-")
    engines: dict[str, TranslatorBase] = {
        f"ct2 {q}": open_model(
            model=export_checkpoint(args.ckpt, Path(workdir.name) / q, q), device="cpu"
        ).translator
        for q in ("float32", "int8")
    }
    hf_dir = None
    if args.transformers:
        hf_dir = export_to_transformers(args.ckpt, Path(workdir.name) / "transformers")
        engines["transformers"] = open_model(model=hf_dir, device="cpu").translator
    print(f"{args.ckpt}: {len(texts)} {args.split} sentences; reference side: {ours.compute}")
    greedy: list[Hypothesis] = []
    for search, beam in SEARCHES.items():
        reference, seconds = decode(ours, sources, beam)
        if beam == 1:
            greedy = reference
        report(f"pytorch {search}", ours, reference, reference, references, seconds)
        for name, engine in engines.items():
            got, seconds = decode(engine, sources, beam)
            report(f"{name} {search}", engine, got, reference, references, seconds)
        if hf_dir is not None:
            got, seconds = plain_generate(
                hf_dir, engines["transformers"].decode_cfg, sources, beam, ours.batch_tokens
            )
            transformers = engines["transformers"]
            report(f"generate() {search}", transformers, got, reference, references, seconds, scored=False)
    if hf_dir is not None:
        rows = min(LOGIT_ROWS, len(sources))
        gap = logits_gap(ours.model, engines["transformers"], sources[:rows], greedy[:rows])
        print(
            f"  float32 logits: largest |Δ| {gap:.1e} on the first {rows} sentences, PyTorch vs transformers"
        )


def logits_gap(model, exported: HFTranslator, sources: list[list[int]], greedy: list[Hypothesis]) -> float:
    """Largest |Δ| between the checkpoint's float32 logits and the transformers export's, teacher-forced
    on the checkpoint's greedy outputs, over the real (non-pad) positions."""
    import torch

    src = pad_ids(sources)  # (B, S)
    tgt = pad_ids([[BOS_ID, *hypothesis.tokens] for hypothesis in greedy])[:, : model.cfg.max_positions]
    with torch.inference_mode():
        mine = model(src, tgt)  # (B, T, V)
        theirs = exported.logits(src, tgt)
    return (mine - theirs.float())[tgt != PAD_ID].abs().max().item()


def report(
    name: str,
    translator: TranslatorBase,
    got: list[Hypothesis],
    reference: list[Hypothesis],
    references: list[list[str]],
    seconds: float,
    scored: bool = True,
) -> None:
    """One line; ``scored=False`` for hypotheses whose scores are not ours (printed as —)."""
    same = [g.tokens == r.tokens for g, r in zip(got, reference, strict=True)]
    gap = max(
        (abs(g.score - r.score) for g, r, s in zip(got, reference, same, strict=True) if s), default=0.0
    )
    result = score(translator.tokenizer.decode_target([h.tokens for h in got]), references)
    print(
        f"  {name:22s} same tokens {100 * sum(same) / len(same):6.2f} %  "
        f"max |Δscore| {f'{gap:.2e}' if scored else '   —    '}  "
        f"BLEU {result['bleu']:6.2f}  chrF {result['chrf']:6.2f}  ({seconds:.1f} s, {translator.compute})"
    )


if __name__ == "__main__":
    main()
