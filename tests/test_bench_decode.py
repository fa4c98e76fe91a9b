"""bench/decode.py (d): two trained checkpoints decoded end to end, timed and scored side by side."""

import subprocess
import sys
from pathlib import Path

from compose import ROOT


def run_bench(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "bench/decode.py", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_a_model_against_itself_gains_nothing_and_each_search_gets_its_ratios(trained_ckpt: Path) -> None:
    result = run_bench(
        "--ckpt", str(trained_ckpt), "--baseline-ckpt", str(trained_ckpt), "--models-only", "--reps", "1"
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
    assert sum(line.startswith("(d) ") for line in result.stdout.splitlines()) == 2
    assert not any(line.startswith("(a)") for line in result.stdout.splitlines())  # --models-only


def test_models_only_without_a_baseline_is_refused_with_the_reason(trained_ckpt: Path) -> None:
    result = run_bench("--ckpt", str(trained_ckpt), "--models-only")
    assert result.returncode == 2
    assert "--models-only runs (d), which needs --ckpt and --baseline-ckpt" in result.stderr


def test_a_peer_without_a_checkpoint_is_refused_with_the_reason() -> None:
    result = run_bench("--peer", str(ROOT), "--models-only")
    assert result.returncode == 2
    assert "--peer compares the decoding of the checkpoint of --ckpt" in result.stderr
