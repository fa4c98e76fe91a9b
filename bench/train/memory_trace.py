"""Where a training run's resident memory goes over the run, to tell a leak from an allocator's keep.

The default recipe's real run (``bench/lib/loop_run.py``: train.py's own Trainer, validation on, the
allocator train.py picks) with two probes: a thread that reads the resident memory of the process
and its loader worker every second (as ``bench/train/memory.py`` does), and a callback after every
training step and validation that records the process's anonymous and file-backed pages, the
allocator's own counters (jemalloc's ``allocated``: bytes the program holds, ``resident``: pages it
keeps, ``retained``: address space it keeps unmapped; or glibc's bytes in use and free), and the
batch's shape. With ``--tracemalloc FRAMES`` it also records the bytes Python objects hold and
compares snapshots taken at ``--snapshots`` steps, naming the lines that allocated what grew (it
slows the steps: leave it off for timings). Prints each window's figures and the run's growth: the
process's peak after the first third of the run against its peak in the first third.

    python -m bench.train.memory_trace --record memory-zen3-default-30min-trace
    python -m bench.train.memory_trace --steps 700 --tracemalloc 1 --snapshots 200 440 470 700
        --window-steps 50
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import seq2seq.machine.use_allocator  # noqa: F401  (as train.py: restarts under the allocator it wants)
from bench.lib.loop_run import ROOT, run_loop, with_recipe
from bench.lib.measure import (
    RECORDS,
    add_target_option,
    machine,
    memory_status,
    print_ratios,
    targets,
    write_record,
)
from bench.train.memory import growth
from bench.train.memory import sample as sample_tree
from seq2seq.machine.hardware import describe
from seq2seq.machine.memory import allocator_in_use

MIB, GIB = 2**20, 2**30
LONGER_THAN_THE_STEPS = "00:03:00:00"  # with --steps the probe ends the run; the LR schedule follows max_time
JEMALLOC_STATS = ("allocated", "resident", "retained")
GLIBC_STATS = ("glibc_in_use", "glibc_free")
TARGETS = {
    "memory_trace_growth": 1.05,  # the process's peak after the first third over its peak in it, at most
    "memory_trace_peak_tree_rss_gib": 2.0,  # the process and its loader worker, at most (GiB)
}


_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (*_MALLINFO2, "keepcost")]


class Allocator:
    """The allocator's own counters: jemalloc's ``stats.*`` through ``mallctl``, or glibc's
    ``mallinfo2`` (bytes in use, and bytes free in its heaps that it keeps); none under mimalloc,
    where glibc's heaps sit unused."""

    def __init__(self) -> None:
        process = ctypes.CDLL(None)
        self.mallctl = getattr(process, "mallctl", None)
        mimalloc = "libmimalloc" in Path("/proc/self/maps").read_text()
        self.mallinfo2 = None if mimalloc else getattr(process, "mallinfo2", None)
        if self.mallinfo2 is not None:
            self.mallinfo2.restype = _Mallinfo2

    def stats(self) -> dict[str, int]:
        if self.mallctl is None:
            if self.mallinfo2 is None:
                return {}
            info = self.mallinfo2()
            return {"glibc_in_use": info.uordblks + info.hblkhd, "glibc_free": info.fordblks}
        epoch = ctypes.c_uint64(1)
        self.mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.sizeof(epoch))  # refresh the counters
        found = {}
        for name in JEMALLOC_STATS:
            value, size = ctypes.c_size_t(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
            if self.mallctl(f"stats.{name}".encode(), ctypes.byref(value), ctypes.byref(size), None, 0) == 0:
                found[f"jemalloc_{name}"] = value.value
        return found


def probe(steps: int | None, snapshot_steps: set[int], events: list[dict], diffs: dict[str, Any]) -> Any:
    """A Lightning callback that records memory after every step and validation, takes the
    ``tracemalloc`` snapshots and, with ``steps``, stops the run after that many steps."""
    import pytorch_lightning as pl

    allocator = Allocator()
    start = time.monotonic()
    snapshots: dict[int, tracemalloc.Snapshot] = {}

    def record(trainer: Any, event: str, shapes: dict[str, list[int]]) -> None:
        python = {"python": tracemalloc.get_traced_memory()[0]} if tracemalloc.is_tracing() else {}
        events.append(
            {
                "event": event,
                "step": trainer.global_step,
                "epoch": trainer.current_epoch,
                "seconds": round(time.monotonic() - start, 2),
                **memory_status(),
                **allocator.stats(),
                **python,
                **shapes,
            }
        )

    class Probe(pl.Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, idx: int) -> None:
            step = trainer.global_step
            record(trainer, "step", {"src": list(batch.src.shape), "tgt": list(batch.tgt_in.shape)})
            if step in snapshot_steps and tracemalloc.is_tracing():
                snapshots[step] = tracemalloc.take_snapshot()
            if steps is not None and step >= steps:
                trainer.should_stop = True

        def on_validation_end(self, trainer: Any, module: Any) -> None:
            record(trainer, "validation", {})

        def on_train_end(self, trainer: Any, module: Any) -> None:
            for before, after in itertools.pairwise(sorted(snapshots)):
                top = snapshots[after].compare_to(snapshots[before], "lineno")[:12]
                diffs[f"{before}->{after}"] = [
                    {"where": str(stat.traceback), "bytes": stat.size_diff, "count": stat.count_diff}
                    for stat in top
                ]

    return Probe()


def windows(rss: list[tuple], events: list[dict], by: str, size: float) -> list[dict[str, Any]]:
    """Per window of ``size`` minutes (``by="minutes"``) or steps (``by="steps"``): the process's RSS
    over the per-second samples (median, 90th percentile, largest), the medians of the per-step
    counters, and the validations in it."""
    steps = [e for e in events if e["event"] == "step"]

    def position(event: dict) -> float:
        return event["seconds"] / 60 if by == "minutes" else event["step"]

    def minute_of(step: int) -> float:  # where a step window starts and ends on the clock
        return next((e["seconds"] / 60 for e in steps if e["step"] >= step), float("inf"))

    end = max(position(e) for e in steps)
    rows = []
    for first in itertools.takewhile(lambda at: at < end, itertools.count(0, size)):
        last = first + size
        start_min, end_min = (first, last) if by == "minutes" else (minute_of(first), minute_of(last))
        own = sorted(s[1] for s in rss if start_min <= s[0] / 60 < end_min)
        inside = [e for e in steps if first <= position(e) < last]
        if not own or not inside:
            continue
        row = {
            by: f"{first:g}-{last:g}",
            "steps": f"{inside[0]['step']}-{inside[-1]['step']}",
            "rss_median_gib": round(statistics.median(own) / GIB, 3),
            "rss_p90_gib": round(own[int(0.9 * (len(own) - 1))] / GIB, 3),
            "rss_max_gib": round(own[-1] / GIB, 3),
        }
        for key in ("RssFile", *(f"jemalloc_{n}" for n in JEMALLOC_STATS), *GLIBC_STATS, "python"):
            if key in inside[0]:
                row[f"{key}_mib"] = round(statistics.median(e[key] for e in inside) / MIB, 1)
        validations = [
            e["step"] for e in events if e["event"] == "validation" and first <= position(e) < last
        ]
        row["validations_at_step"] = validations
        rows.append(row)
    return rows


def trace_record(name: str, rows: list[dict], notes: str) -> dict[str, Any]:
    """A table record of the windows: RSS and the allocator's counters (malloc's or jemalloc's)."""
    glibc = "glibc_in_use_mib" in rows[0]
    counters = ("glibc_in_use", "glibc_free") if glibc else ("jemalloc_allocated", "jemalloc_resident")
    allocator = "malloc: in use / free in its heaps" if glibc else "jemalloc: allocated / resident"
    header = ["minutes", "steps", "RSS median / p90 / largest, GiB", f"{allocator}, MiB (step ends)"]
    body = [
        [
            row["minutes"],
            row["steps"],
            f"{row['rss_median_gib']:.2f} / {row['rss_p90_gib']:.2f} / {row['rss_max_gib']:.2f}",
            " / ".join(f"{row.get(f'{counter}_mib', 0):,.0f}" for counter in counters),
        ]
        for row in rows
    ]
    return {
        "kind": "table",
        "name": name,
        "commit": None,
        "machine": machine(),
        "notes": notes,
        "header": header,
        "rows": body,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, help="stop after this many steps (default: the recipe's time)")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES", help="trace Python (0: off)")
    parser.add_argument("--snapshots", type=int, nargs="*", default=[], help="steps to snapshot Python at")
    window = parser.add_mutually_exclusive_group()
    window.add_argument("--window-minutes", type=float, default=5.0, help="minutes per line of the summary")
    window.add_argument("--window-steps", type=int, help="steps per line of the summary instead")
    parser.add_argument("--out", type=Path, help="also write every sample to this JSON file")
    parser.add_argument("--record", help="write docs/records/NAME.json (the windows by minutes)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the default run")
    add_target_option(parser, TARGETS)
    args = parser.parse_args(argv)
    goals = targets(args)
    print(describe(), f"allocator: {allocator_in_use()}", sep="\n", flush=True)
    if args.tracemalloc:
        tracemalloc.start(args.tracemalloc)
    events: list[dict] = []
    diffs: dict[str, Any] = {}
    rss: list[tuple[float, int, int, int]] = []
    done = threading.Event()
    sampler = threading.Thread(target=sample_tree, args=(os.getpid(), rss, done))
    overrides = [f"trainer.max_time={LONGER_THAN_THE_STEPS}"] if args.steps else []
    with tempfile.TemporaryDirectory() as run_dir:
        sampler.start()
        callback = probe(args.steps, set(args.snapshots), events, diffs)
        run_loop(
            ROOT, with_recipe([*overrides, *args.overrides]), [callback], Path(run_dir), loop_overrides=()
        )
        done.set()
        sampler.join()
    by, size = ("steps", args.window_steps) if args.window_steps else ("minutes", args.window_minutes)
    rows = windows(rss, events, by, size)
    if args.out:
        args.out.write_text(json.dumps({"rss": rss, "events": events, "windows": rows, "diffs": diffs}))
    for row in rows:
        print(json.dumps(row), flush=True)
    for pair, top in diffs.items():
        print(f"Python objects, steps {pair}:", flush=True)
        for stat in top[:8]:
            print(
                f"  {stat['bytes'] / MIB:+8.2f} MiB  {stat['count']:+7d} objects  {stat['where']}", flush=True
            )
    figures = {
        "memory_trace_growth": growth(rss),
        "memory_trace_peak_tree_rss_gib": max(s[2] for s in rss) / GIB,
    }
    print_ratios(figures.items(), goals, digits=3)
    if args.record:
        command = f"python -m bench.train.memory_trace {' '.join(argv or sys.argv[1:])}"
        last = events[-1]
        notes = (
            f"{command}; {describe()}; allocator: {allocator_in_use()}. {last['step']} steps. "
            f"Growth {100 * (figures['memory_trace_growth'] - 1):+.1f} %, the process's peak after the "
            f"first third against its peak in it; peak with the loader worker "
            f"{figures['memory_trace_peak_tree_rss_gib']:.2f} GiB."
        )
        write_record(RECORDS / f"{args.record}.json", trace_record(args.record, rows, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
