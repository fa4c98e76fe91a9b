"""bench/decode/models.py: two trained checkpoints decoded end to end, timed and scored side by side;
bench/decode/dtypes.py gives every ratio a target, whichever decoder comes first;
bench/decode/peer.py refuses to run without a checkpoint; bench/decode/constraints.py puts every
glossary term in every constrained output."""

import json
import subprocess
from pathlib import Path

from bench.lib import measure
from tests.helpers.compose import ROOT
from tests.helpers.in_process import python


def run_bench(script: str, *args: str) -> subprocess.CompletedProcess:
    return python("-m", script, *args)


def test_a_model_against_itself_gains_nothing_and_each_search_gets_its_ratios(trained_ckpt: Path) -> None:
    result = run_bench(
        "bench.decode.models",
        "--ckpt",
        str(trained_ckpt),
        "--baseline-ckpt",
        str(trained_ckpt),
        "--reps",
        "1",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ratios = {
        line.split()[1]: (float(line.split()[2]), line.split()[4])
        for line in result.stdout.splitlines()
        if line.startswith("RATIO ")
    }
    assert set(ratios) == {
        f"model_vs_baseline_{search}_{figure}"
        for search in ("beam5", "greedy")
        for figure in ("speedup", "bleu_gain")
    }
    assert ratios["model_vs_baseline_beam5_bleu_gain"] == (0.0, "0")  # the same model scores the same
    assert ratios["model_vs_baseline_greedy_bleu_gain"] == (0.0, "0")
    assert (
        ratios["model_vs_baseline_beam5_speedup"][0] > 0
        and ratios["model_vs_baseline_beam5_speedup"][1] == "1.5"
    )
    lines = result.stdout.splitlines()
    assert sum(" test sentences: " in line for line in lines) == 2  # one line per search
    assert not any("KV cache" in line for line in lines)  # the two models alone, no other measurement


def test_dtypes_with_bfloat16_first_prints_each_ratio_with_its_target(trained_ckpt: Path) -> None:
    result = run_bench(
        "bench.decode.dtypes", "--ckpt", str(trained_ckpt), "--decoders", "bfloat16", "float32", "--reps", "1"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith("RATIO ")]
    targets = {words[1]: words[4] for words in lines}
    assert targets["beam5_over_greedy_bfloat16"] == targets["beam5_over_greedy_float32"] == "2.0"
    assert targets["decode_greedy_speed_vs_bfloat16_float32"] == "1"  # no float32 first: once a StopIteration
    assert targets["decode_beam5_bleu_vs_bfloat16_float32"] == "-0.3"


def test_two_models_without_a_baseline_are_refused_with_the_reason(trained_ckpt: Path) -> None:
    result = run_bench("bench.decode.models", "--ckpt", str(trained_ckpt))
    assert result.returncode == 2
    assert "the following arguments are required: --baseline-ckpt" in result.stderr


def test_a_peer_without_a_checkpoint_is_refused_with_the_reason() -> None:
    result = run_bench("bench.decode.peer", "--peer", str(ROOT))
    assert result.returncode == 2
    assert "the following arguments are required: --ckpt" in result.stderr


def test_constraints_put_every_term_in_every_output_and_print_their_ratios(
    trained_ckpt: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(measure, "RECORDS", tmp_path)
    result = run_bench(
        "bench.decode.constraints",
        "--ckpt",
        str(trained_ckpt),
        "--limit",
        "8",
        "--reps",
        "1",
        "--record",
        "x",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    ratios = {words[1]: (float(words[2]), words[4]) for words in map(str.split, lines) if words[0] == "RATIO"}
    assert set(ratios) == {"constrained_vs_plain_speed", "constrained_terms_present", "constrained_bleu_gain"}
    assert ratios["constrained_terms_present"] == (1.0, "1.0")
    assert ratios["constrained_vs_plain_speed"][0] > 0
    assert any(line.startswith("8 test sentences, beam ") for line in lines)
    assert sum(" BLEU " in line for line in lines) == 2  # plain and constrained
    record = json.loads((tmp_path / "x.json").read_text())
    assert [row[0] for row in record["rows"]] == ["plain", "constrained"] and record["rows"][1][2] == "100.0%"
    assert record["ratios"]["constrained_terms_present"] == 1.0
