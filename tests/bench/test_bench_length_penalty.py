"""bench/decode/length_penalty.py: the alpha is chosen on the validation split and checked on the test
split."""

from pathlib import Path

import pytest

from bench.decode.length_penalty import study
from bench.lib.measure import decode_split
from seq2seq.data import corpus
from seq2seq.formats.checkpoint import load_model
from seq2seq.inference.backends import open_model
from tests.helpers.in_process import python


@pytest.mark.slow
def test_the_alpha_with_the_best_validation_bleu_is_scored_on_test(trained_ckpt: Path) -> None:
    on_valid, chosen, own = study(trained_ckpt, beam=2, grid=(0.0, 1.0))
    assert [scored.alpha for scored in on_valid] == [0.0, 1.0]
    assert chosen.alpha == max(on_valid, key=lambda scored: scored.bleu).alpha
    assert own.alpha == load_model(trained_ckpt).decode_config.length_penalty
    translator = open_model(trained_ckpt, device="cpu", dtype="float32").translator
    splits, _ = corpus.load_splits(load_model(trained_ckpt).data_config)
    again = decode_split(translator, *corpus.references(splits["test"]), chosen.alpha, beam=2)
    assert (again.bleu, again.chrf) == (chosen.bleu, chosen.chrf)  # the test figure is that alpha's


@pytest.mark.slow
def test_the_command_prints_its_ratio_line(trained_ckpt: Path) -> None:
    result = python("-m", "bench.decode.length_penalty", "--ckpt", str(trained_ckpt), "--beam", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert sum(line.startswith("valid  alpha ") for line in lines) == 10
    assert lines[-1].startswith("RATIO length_penalty_test_bleu_gain ") and lines[-1].endswith(" target 0")
