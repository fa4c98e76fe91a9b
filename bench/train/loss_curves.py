"""Does the default recipe train to the same loss per step? Compares loss curves that
``bench/train/loss_curve.py`` wrote: two versions of the code, two seeds each.

Per window of steps, the mean training loss of every run; the gap between the two versions' means
against the seed spread (the larger difference between one version's two seeds). The code trains
"the same" where the gap stays within the spread. The seeds change the initial weights, the
dropout masks and the batch order, so the spread is the noise any change must stay inside.

    python -m bench.train.loss_curves OLD_SEED1.json OLD_SEED2.json NEW_SEED1.json NEW_SEED2.json
        [--window 100]

Ends with ``RATIO seed_spread_per_loss_gap <value> target 1`` for the last window: at least 1 means
the versions differ by no more than the seeds do. Before it, the largest difference between the
two versions' losses at the same step and seed: where the versions compute the same thing, only
float rounding moves it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench.lib.measure import add_target_option, ratio_line, target_for, targets

TARGETS = {"seed_spread_per_loss_gap": 1}  # the versions differ by no more than the seeds do


def window_means(losses: list[float], window: int) -> list[float]:
    """Mean loss of steps 1..window, window+1..2·window, ... (a last partial window is dropped)."""
    return [statistics.fmean(losses[i : i + window]) for i in range(0, len(losses) - window + 1, window)]


def load(paths: list[Path]) -> dict[str, list[list[float]]]:
    """The recorded losses of each run, grouped by the commit they ran, in the order given."""
    versions: dict[str, list[list[float]]] = {}
    for path in paths:
        record = json.loads(path.read_text())
        versions.setdefault(record["commit"][:12], []).append(record["losses"])
    return versions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, nargs=4, help="two runs of one commit, then two of another")
    parser.add_argument("--window", type=int, default=100, help="steps per window (default 100)")
    add_target_option(parser, TARGETS)
    args = parser.parse_args()
    versions = load(args.records)
    if len(versions) != 2 or any(len(runs) != 2 for runs in versions.values()):
        raise SystemExit("error: give two records of one commit and two of another")
    means = {commit: [window_means(run, args.window) for run in runs] for commit, runs in versions.items()}
    (old, old_runs), (new, new_runs) = means.items()
    windows = min(len(run) for runs in means.values() for run in runs)
    if windows == 0:
        raise SystemExit(f"error: the records hold fewer than {args.window} steps")
    print(f"mean training loss per {args.window} steps: {old} (seeds as given) vs {new}")
    print(
        "steps      | "
        + " | ".join(f"{old} s{i + 1}" for i in range(2))
        + " | "
        + " | ".join(f"{new} s{i + 1}" for i in range(2))
        + " | gap of means | seed spread"
    )
    ratio = 0.0
    for w in range(windows):
        olds, news = [run[w] for run in old_runs], [run[w] for run in new_runs]
        gap = abs(statistics.fmean(news) - statistics.fmean(olds))
        spread = max(abs(olds[0] - olds[1]), abs(news[0] - news[1]))
        ratio = spread / gap if gap else float("inf")
        cells = " | ".join(f"{value:9.4f}" for value in (*olds, *news))
        print(
            f"{w * args.window + 1:4d}-{(w + 1) * args.window:<5d} | {cells} | {gap:12.4f} | {spread:11.4f}"
        )
    pairs = zip(versions[old], versions[new], strict=True)  # the same seed: a run stopped early is shorter
    same_seed = [max(abs(a - b) for a, b in zip(o, n, strict=False)) for o, n in pairs]
    print(
        "largest per-step loss difference at the same seed: "
        + ", ".join(f"s{i + 1} {d:.2g}" for i, d in enumerate(same_seed))
    )
    name = "seed_spread_per_loss_gap"
    print(ratio_line(name, ratio, target_for(name, targets(args))))


if __name__ == "__main__":
    main()
