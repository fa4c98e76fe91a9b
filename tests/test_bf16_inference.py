"""bf16 and int8 decoding against float32, within bounds that fit bf16, on any CPU (bf16 is
emulated where it has no bf16 instructions: slower, the same rounding).

bf16 keeps 8 significant bits, so a logit near 10 moves by about 0.04 and a hypothesis' score (its
mean log-probability per token) by a few hundredths: measured at most 0.09 on this model, on a CPU
with AMX and with oneDNN capped at AVX2. :data:`SCORE_BOUND` leaves room above that. A model that
has learnt its sentences by heart has clear margins, as a good model has: greedy search keeps
every translation; beam search ranks near-equal hypotheses, so a few may swap. int8 weights (the
decoder's and the output projection's, with activations quantised per call) move scores less than
that here (at most 0.04).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import MEMORISED_PAIRS
from tiny import CORPUS

from seq2seq.export.to_ctranslate2 import export_checkpoint
from seq2seq.inference.backends import open_model
from seq2seq.inference.cli import main
from seq2seq.inference.evaluation import score
from seq2seq.inference.translator import Translation, Translator

SCORE_BOUND = 0.15  # |score in bf16 - score in float32| for the same translation
# beam 5: share of sentences with the float32 translation; measured 38 of 38 on an AMD EPYC with
# AVX512-BF16, 38 of 40 on an AMX Xeon (with the near-tied source that :func:`memorised` leaves out)
BEAM_SAME_SHARE = 0.9
BEAM_BLEU_BOUND = 5.0  # beam 5: BLEU points; one changed sentence of 38 moves BLEU by 2-4


@pytest.fixture(scope="module")
def memorised() -> tuple[list[str], list[list[str]]]:
    """The sources the memorised model learnt with one translation, and that translation. A source
    learnt with two ("Think about it." as "Piénsalo." and as "Piensa al respecto.") leaves the
    model a near tie between them, which any rounding may flip, bf16's on one CPU and not another."""
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()][:MEMORISED_PAIRS]
    learnt = Counter(source for source, _ in pairs)
    kept = [(source, target) for source, target in pairs if learnt[source] == 1]
    return [source for source, _ in kept], [[target] for _, target in kept]


def best(translator: Translator, texts: list[str], beam: int) -> list[Translation]:
    return [nbest[0] for nbest in translator.translate(texts, translator.decode_cfg_with(beam=beam, nbest=1))]


def score_gaps(ours: list[Translation], theirs: list[Translation]) -> list[float]:
    return [abs(a.score - b.score) for a, b in zip(ours, theirs, strict=True) if a.text == b.text]


LOW_PRECISION = ["bfloat16", "int8"]


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_greedy_in_low_precision_keeps_every_translation_and_moves_scores_within_bounds(
    memorised_ckpt, memorised, dtype
):
    sources, references = memorised
    fp32 = best(open_model(memorised_ckpt, device="cpu", dtype="float32").translator, sources, beam=1)
    bf16 = best(open_model(memorised_ckpt, device="cpu", dtype=dtype).translator, sources, beam=1)
    assert score([t.text for t in fp32], references)["bleu"] > 90  # the model did learn its sentences
    assert [t.text for t in bf16] == [t.text for t in fp32]
    assert max(score_gaps(bf16, fp32)) <= SCORE_BOUND
    assert score_gaps(bf16, fp32) != [0.0] * len(sources)  # so bf16 did run: its rounding shows


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_beam_search_in_low_precision_stays_within_bounds_of_float32(memorised_ckpt, memorised, dtype):
    sources, references = memorised
    fp32 = best(open_model(memorised_ckpt, device="cpu", dtype="float32").translator, sources, beam=5)
    bf16 = best(open_model(memorised_ckpt, device="cpu", dtype=dtype).translator, sources, beam=5)
    gaps = score_gaps(bf16, fp32)
    assert len(gaps) >= BEAM_SAME_SHARE * len(sources)
    assert max(gaps) <= SCORE_BOUND
    bleu = [score([t.text for t in side], references)["bleu"] for side in (bf16, fp32)]
    assert abs(bleu[0] - bleu[1]) <= BEAM_BLEU_BOUND


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_low_precision_batches_decode_each_sentence_as_it_decodes_alone(memorised_ckpt, memorised, dtype):
    """What the server's merged batches rely on: padding other rows only moves bf16 rounding (and,
    in int8, the other rows move the activations' shared scale)."""
    sources, _ = memorised
    translator = open_model(memorised_ckpt, device="cpu", dtype=dtype).translator
    batched = best(translator, sources, beam=1)
    alone = [best(translator, [source], beam=1)[0] for source in sources]
    assert [t.text for t in alone] == [t.text for t in batched]
    assert max(score_gaps(alone, batched)) <= SCORE_BOUND


def test_translate_in_bf16_scores_as_the_float32_export_and_each_report_says_its_numerics(
    memorised_ckpt: Path, memorised, tmp_path: Path, capsys
) -> None:
    sources, references = memorised
    pairs = tmp_path / "memorised.tsv"
    pairs.write_text("".join(f"{s}\t{r}\n" for s, (r,) in zip(sources, references, strict=True)), "utf-8")
    exported = export_checkpoint(memorised_ckpt, tmp_path / "f32", "float32")
    reports = {}
    for name, model in {"bf16": ["--ckpt", str(memorised_ckpt), "--dtype", "bfloat16"],
                        "ct2": ["--model", str(exported)]}.items():  # fmt: skip
        assert main([*model, "--device", "cpu", "--greedy", "--eval", str(pairs)]) == 0
        reports[name] = dict(line.split(" = ", 1) for line in capsys.readouterr().out.splitlines())
    assert reports["bf16"]["compute"] == "PyTorch bfloat16 (set explicitly)"
    assert reports["ct2"]["compute"] == "CTranslate2 float32 (the export's weight type)"
    bleu = [float(reports[name]["BLEU"].split()[0]) for name in ("bf16", "ct2")]
    assert bleu[0] == pytest.approx(bleu[1], abs=0.5) and bleu[1] > 90
