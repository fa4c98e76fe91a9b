"""bench/train/loss_curve.py on the tiny experiment: the real loop's per-step loss curve,
recorded the same way for this tree and for the code at a git ref."""

import json
import subprocess
from pathlib import Path

import pytest

from bench.lib.loop_run import without_other_code
from tests.helpers.compose import ROOT
from tests.helpers.in_process import python


def record(out: Path, cache: Path, *extra: str) -> dict:
    command = ["-m", "bench.train.loss_curve", "--out", str(out), "--steps", "4"]
    result = python(*command, *extra, "--set", "experiment=tiny", f"data.cache_dir={cache}")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_loss_curve_is_recorded_per_step_for_this_tree_and_for_a_commit(tmp_path: Path) -> None:
    ours = record(tmp_path / "ours.json", tmp_path / "cache", "--seed", "3")
    assert ours["steps"] == len(ours["losses"]) == len(ours["lrs"]) == 4
    assert ours["overrides"][0] == "seed=3" and ours["precision"] == "32-true"
    assert all(0 < loss < 20 for loss in ours["losses"])
    assert ours["lrs"] == sorted(ours["lrs"]) and len(set(ours["lrs"])) == 4  # warmup: the LR rises
    assert ours["hardware"].startswith("hardware: ")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    committed = record(tmp_path / "head.json", tmp_path / "cache", "--seed", "3", "--ref", "HEAD")
    assert committed["commit"] == head  # the code at the ref, extracted, not this working tree
    assert len(committed["losses"]) == 4


def test_the_loop_keeps_pythonpath_packages_but_not_another_copy_of_the_code(tmp_path: Path) -> None:
    packages, other_code = tmp_path / "site", tmp_path / "checkout"
    (packages / "hydra").mkdir(parents=True)
    (other_code / "seq2seq").mkdir(parents=True)
    pythonpath = f"{packages}:{other_code}::{packages}"
    assert without_other_code(pythonpath) == f"{packages}:{packages}"
    assert without_other_code("") == ""
