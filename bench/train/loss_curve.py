"""One run of the default recipe's real training loop, its loss and learning rate at every step, as
JSON: the curves ``bench/train/loss_curves.py`` compares across versions of the code and seeds.

The run is ``train.py``'s own loop (``bench/lib/loop_run.py``) on this working tree as it is, or on the
code at ``--ref`` (extracted with ``git archive``), with ``seed=--seed`` and the ``--set`` overrides.
The JSON also says what reproduces it: the commit (and whether the tree had uncommitted changes),
the overrides and the hardware line.

    python -m bench.train.loss_curve --out FILE --steps 500 --seed S [--ref REF] [--set K=V ...]
"""

from __future__ import annotations

import seq2seq.machine.threads  # noqa: F401  (OpenMP's wait policy as in training: before torch loads)

# isort: split
import argparse
import contextlib
import json
import subprocess
from pathlib import Path

from bench.lib.loop_run import code_at, loop_in_subprocess
from bench.lib.measure import ROOT
from seq2seq.machine.hardware import describe


def record_curve(args: argparse.Namespace) -> None:
    """One run's per-step loss and LR, with what reproduces it, written to ``args.out``."""
    ref = args.ref or "HEAD"
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", ref], capture_output=True, text=True)
    dirty = (
        not args.ref
        and subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True
        ).stdout.strip()
    )
    overrides = [f"seed={args.seed}", *args.set]
    with code_at(ROOT, args.ref) if args.ref else contextlib.nullcontext(ROOT) as tree:
        result = loop_in_subprocess(tree, args.steps - 1, 1, overrides, record=True)
    result.update(
        steps=len(result["losses"]),
        commit=commit.stdout.strip() + (" with uncommitted changes" if dirty else ""),
        overrides=overrides,
        hardware=describe(),
    )
    args.out.write_text(json.dumps(result, indent=1))
    print(f"{len(result['losses'])} steps recorded in {args.out}: final loss {result['losses'][-1]:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--steps", type=int, default=30, help="steps recorded")
    parser.add_argument("--seed", type=int, default=42, help="the run's seed")
    parser.add_argument("--ref", help="the git ref to run (default: this tree as it is)")
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=VALUE", help="Hydra overrides of the run"
    )
    args = parser.parse_args()
    print(describe())
    record_curve(args)


if __name__ == "__main__":
    main()
