"""bench/train/levers.py on the tiny experiment: a lever trained next to the default, figures kept per run."""

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.in_process import python


def run_levers(out: Path) -> subprocess.CompletedProcess:
    levers = ["--lever", "half_batch", "fast=optim.lr=2e-3,optim.warmup_steps=10", "--steps", "6"]
    runs = ["--experiment", "tiny", "--out", str(out), "--seeds", "1", "--parallel", "2"]
    return python("-m", "bench.train.levers", *levers, *runs)


@pytest.mark.slow
def test_a_lever_and_the_default_train_on_the_same_budget_and_are_compared(tmp_path: Path) -> None:
    result = run_levers(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = {
        path.parent.name: json.loads(path.read_text()) for path in tmp_path.glob("tiny-6steps/*/result.json")
    }
    assert set(runs) == {"default-seed1", "half_batch-seed1", "fast-seed1"}
    assert (runs["default-seed1"]["steps"], runs["half_batch-seed1"]["steps"]) == (6, 12)  # as many tokens
    parallel = {name: run["parallel"] for name, run in runs.items()}
    assert parallel == {"default-seed1": 2, "half_batch-seed1": 2, "fast-seed1": 1}  # trained two, then one
    assert {"optim.lr=2e-3", "optim.warmup_steps=10"} <= set(runs["fast-seed1"]["overrides"])  # any override
    assert "data.max_tokens=1250" in runs["half_batch-seed1"]["overrides"]
    assert "data.max_tokens=1250" not in runs["default-seed1"]["overrides"]
    lines = result.stdout.splitlines()
    gain = runs["half_batch-seed1"]["test_bleu_beam5"] - runs["default-seed1"]["test_bleu_beam5"]
    assert f"RATIO lever_half_batch_test_bleu_gain {gain:.3f} target 2" in lines
    assert any(line.startswith("RATIO lever_half_batch_beam5_decode_speedup ") for line in lines)
    assert any(line.startswith("RATIO lever_fast_beam5_decode_speedup ") for line in lines)
    assert sum("(2 at once)" in line for line in lines) == 2  # the table says which runs shared the cores
    checkpoints = {path: path.stat().st_mtime_ns for path in tmp_path.rglob("*.ckpt")}
    again = run_levers(tmp_path)  # the figures are read back, nothing is trained; decoding is timed again
    assert again.returncode == 0, again.stderr[-3000:]
    assert {path: path.stat().st_mtime_ns for path in tmp_path.rglob("*.ckpt")} == checkpoints
    again_lines = again.stdout.splitlines()
    gain_lines = [line for line in lines if line.startswith("RATIO lever_half_batch_test_bleu_gain")]
    assert [line for line in again_lines if line in gain_lines] == gain_lines
    assert any(line.startswith("RATIO lever_half_batch_beam5_decode_speedup ") for line in again_lines)
