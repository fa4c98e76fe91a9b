"""BLEU/chrF scoring over all references, and ``translate.py --eval`` on a real tiny checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from seq2seq.inference.evaluation import reference_streams, score


def test_eval_tsv_prints_bleu_and_chrf_with_signatures(checkpoint: Path, tmp_path: Path, run_cli) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(
        "Hi.\tHola.\nHi.\t¡Hola!\nGo.\tVe.\nI like coffee.\tMe gusta el café.\n", encoding="utf-8"
    )
    hypotheses = tmp_path / "hyp.txt"
    code, lines, _ = run_cli(
        "--ckpt", str(checkpoint), "--device", "cpu", "--eval", str(pairs), "-o", str(hypotheses)
    )
    assert code == 0
    report = "\n".join(lines)
    assert "BLEU = " in report and "nrefs:var|case:mixed" in report
    assert "chrF = " in report and "nc:6|nw:0" in report
    assert "BLEU[src words 1-5]" in report and "sentences = 3" in report
    assert len(hypotheses.read_text(encoding="utf-8").splitlines()) == 3


def test_eval_split_rebuilds_the_training_split(checkpoint: Path, run_cli) -> None:
    code, lines, err = run_cli("--ckpt", str(checkpoint), "--device", "cpu", "--greedy", "--eval", "test")
    assert code == 0, err
    assert any(line.startswith("BLEU = ") for line in lines)
    assert "sentences = 12" in lines


def test_variable_reference_counts_are_padded_with_none() -> None:
    hypotheses = ["el gato está en la mesa", "hola"]
    references = [["el gato está sobre la mesa", "un gato está en la mesa"], ["hola amigo mío y tuyo"]]
    assert reference_streams(references)[1] == ["un gato está en la mesa", None]
    result = score(hypotheses, references)
    assert result["bleu_signature"].startswith("nrefs:var")
    repeated = [["el gato está sobre la mesa", "un gato está en la mesa"], ["hola amigo mío y tuyo"] * 2]
    assert result["bleu"] == pytest.approx(score(hypotheses, repeated)["bleu"])  # None == "no reference"
    assert result["chrf"] == pytest.approx(score(hypotheses, repeated)["chrf"])
