"""Memory of a training run, every process of it, under each setting, against its peer in the same run.

Each setting trains ``python train.py`` for ``--minutes`` in a subprocess (the default recipe, its
final validation included) while a thread reads, every second, the resident memory (RSS) of the
trainer and the RSS and PSS of the whole run: the trainer and its loader workers (PSS splits the
pages a forked worker shares with its parent, where RSS counts them in each). Settings: ``system``
(the C library's malloc: ``SEQ2SEQ_ALLOCATOR=system``), ``mimalloc`` (the one pyproject.toml
installs), ``jemalloc`` where the system has it, and with ``--baseline DIR`` also that checkout's
``train.py`` (the code before a change) under the system allocator; rounds alternate the settings.
Prints ``RATIO`` lines: each setting's peak and tokens/s against ``system``, the trainer's peak RSS
and the run's peak PSS in GiB, and the growth (the trainer's peak after minute 5, or after the first
third of a run under 15 minutes, over its peak before); ``--record NAME`` writes a record.

    python -m bench.train.memory --minutes 3
    python -m bench.train.memory --minutes 30 --precision bf16-mixed --record memory-NAME
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.lib.measure import (
    RECORDS,
    ROOT,
    add_target_option,
    machine,
    ratio_line,
    target_for,
    targets,
    write_record,
)
from seq2seq.machine.hardware import describe
from seq2seq.machine.memory import CHOICE, jemalloc_library

GIB = 2**30
TARGETS = {
    "memory_peak_rss": 1.0,  # a setting's peak at most the system allocator's
    "memory_tokens_per_s": 0.97,  # ... and its speed within 3 % of it
    "memory_trainer_peak_rss_gib": 1.5,  # the trainer's peak RSS, at most (GiB)
    "memory_run_peak_pss_gib": 2.0,  # the whole run's peak PSS (trainer and workers), at most (GiB)
    "memory_growth": 0.05,  # the trainer's peak after minute 5 over its peak before, at most 5 % more
}
GROWTH_FROM_S = 300.0  # growth is measured from minute 5 (from a third of a run shorter than 15 minutes)
STEP_LINE = re.compile(r"step (\d+) .*\| (\d+) tokens/s")


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (loader workers, their children)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        todo.extend(int(child) for child in children)
    return found


def resident(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes from smaps_rollup; (0, 0) once the process is gone. PSS splits the
    pages a forked worker shares with its parent between them, where RSS counts them in each."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0, 0
    fields = dict(re.findall(r"^(Rss|Pss):\s+(\d+) kB", text, re.MULTILINE))
    return int(fields.get("Rss", 0)) * 1024, int(fields.get("Pss", 0)) * 1024


def sample(pid: int, samples: list[tuple[float, int, int, int]], done: threading.Event) -> None:
    """(seconds, process RSS, tree RSS, tree PSS) every second until ``done``."""
    start = time.monotonic()
    while not done.wait(1.0):
        values = [resident(each) for each in tree(pid)]
        if values and values[0][0]:
            seconds = time.monotonic() - start
            samples.append((seconds, values[0][0], sum(r for r, _ in values), sum(p for _, p in values)))


def growth(samples: list[tuple[float, int, int, int]], split_s: float | None = None) -> float:
    """The process's peak after ``split_s`` seconds (a third of the run if None) over its peak before."""
    split = samples[-1][0] / 3 if split_s is None else split_s
    return max(s[1] for s in samples if s[0] >= split) / max(s[1] for s in samples if s[0] < split)


def train(
    setting: str,
    code: Path,
    env: dict[str, str],
    minutes: int,
    precision: str,
    run_dir: Path,
) -> dict[str, float]:
    """One training run of ``setting`` (``env``: its environment variables): its peaks (GiB), growth,
    steps and median tokens/s."""
    command = [
        sys.executable,
        "train.py",
        f"hydra.run.dir={run_dir}",
        f"trainer.max_time=00:00:{minutes:02d}:00",
        f"trainer.precision={precision}",
        "callbacks.progress_bar=false",
        "callbacks.progress_every_n_steps=1",
    ]
    samples: list[tuple[float, int, int, int]] = []
    done = threading.Event()
    process = subprocess.Popen(
        command, cwd=code, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    watcher = threading.Thread(target=sample, args=(process.pid, samples, done))
    watcher.start()
    _, err = process.communicate()
    done.set()
    watcher.join()
    if process.returncode != 0:
        sys.exit(f"error: {setting} run failed: {err.decode(errors='replace').strip().splitlines()[-1:]}")
    steps = STEP_LINE.findall((run_dir / "train.log").read_text())
    return {
        "peak_rss_gib": max(s[1] for s in samples) / GIB,
        "peak_tree_rss_gib": max(s[2] for s in samples) / GIB,
        "peak_tree_pss_gib": max(s[3] for s in samples) / GIB,
        "growth": growth(samples, GROWTH_FROM_S if minutes >= 15 else None) - 1,
        "steps": int(steps[-1][0]) if steps else 0,
        "tokens_per_s": statistics.median(int(rate) for _, rate in steps[1:]) if len(steps) > 1 else 0.0,
    }


def memory_record(name: str, best: dict[str, dict[str, float]], command: str, precision: str) -> dict:
    """The record ``docs/records/NAME.json``: a table of each setting's medians over the rounds."""
    header = ["setting", "trainer's peak RSS", "run's peak PSS (RSS)", "growth", "steps", "tokens/s"]
    rows = [
        [
            name,
            f"{f['peak_rss_gib']:.2f} GiB",
            f"{f['peak_tree_pss_gib']:.2f} ({f['peak_tree_rss_gib']:.2f}) GiB",
            f"{100 * f['growth']:+.1f} %",
            f"{f['steps']:.0f}",
            f"{f['tokens_per_s']:,.0f}",
        ]
        for name, f in best.items()
    ]
    return {
        "kind": "table",
        "name": name,
        "commit": None,
        "provenance": command,
        "machine": machine(),
        "notes": f"{command}; trainer.precision={precision}; {describe()}",
        "header": header,
        "rows": rows,
    }


def settings_to_run(baseline: Path | None) -> dict[str, tuple[Path, dict[str, str]]]:
    """Each setting's checkout and environment: ``system`` is the peer of every ratio."""
    settings = {name: (ROOT, {CHOICE: name}) for name in ("system", "mimalloc")}
    if jemalloc_library():
        settings["jemalloc"] = (ROOT, {CHOICE: "jemalloc"})
    if baseline:
        settings["baseline"] = (baseline, {CHOICE: "system"})
    return settings


def print_ratios(best: dict[str, dict[str, float]], goals: dict[str, float]) -> None:
    peer = best["system"]
    for name, figures in best.items():
        ratios = {
            f"memory_trainer_peak_rss_gib_{name}": figures["peak_rss_gib"],
            f"memory_run_peak_pss_gib_{name}": figures["peak_tree_pss_gib"],
            f"memory_growth_{name}": figures["growth"],
        }
        if name != "system":
            ratios[f"memory_peak_rss_{name}_vs_system"] = figures["peak_rss_gib"] / peer["peak_rss_gib"]
            speed = figures["tokens_per_s"] / max(1.0, peer["tokens_per_s"])
            ratios[f"memory_tokens_per_s_{name}_vs_system"] = speed
        for ratio, value in ratios.items():
            print(ratio_line(ratio, value, target_for(ratio, goals), digits=3))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=3, help="training time of each run")
    parser.add_argument("--precision", default="auto", help="trainer.precision, e.g. bf16-mixed")
    parser.add_argument("--rounds", type=int, default=1, help="alternations of the settings")
    parser.add_argument("--baseline", type=Path, help="a checkout of the code before, run as 'baseline'")
    parser.add_argument("--record", help="write docs/records/NAME.json")
    add_target_option(parser, TARGETS)
    args = parser.parse_args(argv)
    goals = targets(args)
    print(describe(), flush=True)
    settings = settings_to_run(args.baseline)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in settings}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for index, (name, (code, env)) in enumerate(settings.items()):
                run_dir = Path(scratch) / f"{index}-{round_}"
                result = train(name, code, env, args.minutes, args.precision, run_dir)
                runs[name].append(result)
                print(name, json.dumps({key: round(value, 3) for key, value in result.items()}), flush=True)
    best = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()}
    print_ratios(best, goals)
    if args.record:
        command = f"python -m bench.train.memory {' '.join(argv or sys.argv[1:])}"
        write_record(
            RECORDS / f"{args.record}.json", memory_record(args.record, best, command, args.precision)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
