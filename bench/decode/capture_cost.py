"""What ``translate.py --capture`` costs before its first translations: the seconds of a fresh
``translate.py`` process over the first ``--sentences`` sources of the test fixture, greedy and
float32 on the CPU, eager against captured, rounds interleaved. A captured process compiles the
decoder step for each batch shape it meets: with an empty inductor cache (``cold``), then with the
cache the cold run left (``warm``). With ``--record``, a table record for docs/records/.

    python -m bench.decode.capture_cost --ckpt best.ckpt [--sentences 40] [--rounds 2] [--record PATH]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.lib.measure import (
    ROOT,
    bench_parser,
    machine,
    ratio_line,
    table_record,
    target_for,
    targets,
    write_record,
)
from seq2seq.machine.hardware import describe

TARGETS = {"capture_cold_vs_eager": 1.0}  # captured as fast as eager to the first translations
SOURCES = ROOT / "tests" / "fixtures" / "tiny.tsv"
RUNS = ("eager", "captured, cold inductor cache", "captured, warm inductor cache")


def timed(command: list[str], text: str, cache: Path) -> tuple[float, str]:
    """Seconds of ``command`` from its start to its exit, with ``text`` on stdin, and its output."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    done = subprocess.run(command, input=text, capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - started, done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, TARGETS)
    parser.add_argument("--ckpt", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--record", type=Path, help="write a table record here (docs/records/NAME.json)")
    args = parser.parse_args(argv)
    lines = SOURCES.read_text(encoding="utf-8").splitlines()[: args.sentences]
    text = "".join(line.split("\t")[0] + "\n" for line in lines)
    eager = [sys.executable, str(ROOT / "translate.py"), "--ckpt", str(args.ckpt), "--device", "cpu"]
    eager += ["--dtype", "float32", "--greedy"]
    commands = dict(zip(RUNS, (eager, [*eager, "--capture"], [*eager, "--capture"]), strict=True))
    seconds: dict[str, list[float]] = {run: [] for run in RUNS}
    outputs: dict[str, str] = {}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache:  # empty for the cold run, filled for the warm one
            for run, command in commands.items():
                took, outputs[run] = timed(command, text, Path(cache))
                seconds[run].append(took)
    same = len(set(outputs.values())) == 1
    print(describe())
    rows = [[run, " and ".join(f"{value:.1f}" for value in seconds[run])] for run in RUNS]
    for run, shown in rows:
        print(f"{run}: {shown} s")
    print(f"the same translations: {same}")
    ratio = min(seconds[RUNS[0]]) / min(seconds[RUNS[1]])
    print(ratio_line("capture_cold_vs_eager", ratio, target_for("capture_cold_vs_eager", targets(args))))
    if args.record:
        notes = (
            f"python -m bench.decode.capture_cost --sentences {args.sentences} --rounds {args.rounds}; "
            f"{describe()}; the same translations in every run: {same}."
        )
        header = ["translate.py, greedy, float32, CPU", "seconds to exit (each round)"]
        record = table_record(
            args.record.stem, machine(), notes, header, rows, {"capture_cold_vs_eager": ratio}
        )
        write_record(args.record, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
