"""bench/train/loss_curves.py: the gap between two versions' loss curves against the spread of their seeds."""

import json
from pathlib import Path

import pytest

from tests.helpers.in_process import python


def write_records(tmp_path: Path, offsets: dict[str, list[float]]) -> list[Path]:
    """Two 200-step records per commit, each a falling curve shifted by its offset."""
    paths = []
    for commit, shifts in offsets.items():
        for seed, shift in enumerate(shifts, 1):
            path = tmp_path / f"{commit}-{seed}.json"
            losses = [10.0 - step / 40 + shift for step in range(200)]
            path.write_text(json.dumps({"commit": commit, "losses": losses}))
            paths.append(path)
    return paths


def ratio_of(paths: list[Path]) -> float:
    done = python("-m", "bench.train.loss_curves", *map(str, paths))
    assert done.returncode == 0, done.stderr
    name, value, _, target = done.stdout.splitlines()[-1].split()[1:]
    assert (name, target) == ("seed_spread_per_loss_gap", "1")
    return float(value)


def test_versions_that_differ_less_than_their_seeds_pass(tmp_path: Path) -> None:
    # seeds 0.2 apart in each version, versions 0.05 apart: 0.2 / 0.05 = 4
    records = write_records(tmp_path, {"old": [0.0, 0.2], "new": [0.05, 0.25]})
    assert ratio_of(records) == pytest.approx(4.0, abs=0.01)


def test_the_same_seeds_largest_step_difference_is_printed(tmp_path: Path) -> None:
    records = write_records(tmp_path, {"old": [0.0, 0.2], "new": [0.0, 0.3]})
    done = python("-m", "bench.train.loss_curves", *map(str, records))
    assert "at the same seed: s1 0, s2 0.1" in done.stdout


def test_a_version_that_trains_worse_than_the_seed_spread_fails(tmp_path: Path) -> None:
    # seeds 0.1 apart, versions 0.5 apart: 0.1 / 0.5 = 0.2
    records = write_records(tmp_path, {"old": [0.0, 0.1], "new": [0.5, 0.6]})
    assert ratio_of(records) == pytest.approx(0.2, abs=0.01)


def test_records_of_one_commit_only_are_refused(tmp_path: Path) -> None:
    paths = write_records(tmp_path, {"old": [0.0, 0.1, 0.2, 0.3]})
    done = python("-m", "bench.train.loss_curves", *map(str, paths))
    assert done.returncode == 1 and "two records of one commit and two of another" in done.stderr
