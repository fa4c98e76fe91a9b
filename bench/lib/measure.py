"""What the benchmarks share: configs and real sentences, interleaved timings and the matmul ceiling,
a checkpoint's test split decoded and scored, targets given on the command line, and records.

Nothing here imports an export backend, so a training benchmark runs where only training's packages
are installed, and torch is imported where a function needs it, so a script that only reads records
starts at once."""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from seq2seq.config import ModelConfig, validated

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parent.parent.parent
CORPUS = ROOT / "data" / "spa-eng" / "spa.txt.gz"
RECORDS = ROOT / "docs" / "records"


def model_config(name: str) -> ModelConfig:
    """The sizes of ``configs/model/<name>.yaml``, validated as training validates them."""
    return validated(ModelConfig, OmegaConf.load(ROOT / "configs" / "model" / f"{name}.yaml"), "model")


def sample_corpus_pairs(count: int) -> tuple[list[str], list[str]]:
    """``count`` (English, Spanish) pairs spread evenly over the corpus, which is sorted by length."""
    with gzip.open(CORPUS, "rt", encoding="utf-8") as handle:
        pairs = [line.rstrip("\n").split("\t")[:2] for line in handle]
    picked = [pairs[int(i * len(pairs) / count)] for i in range(count)]
    return [en for en, _ in picked], [es for _, es in picked]


def median_times(runs: dict[Any, Callable[[], object]], reps: int) -> dict[Any, float]:
    """Median seconds of each run, repetitions interleaved so drifting machine load hits all alike.

    On a GPU (CUDA is asynchronous) the queue is drained before the first run, so earlier kernels
    finish outside the timings, and inside each timing, so a run is timed to its last kernel."""
    import torch

    times: dict[Any, list[float]] = {name: [] for name in runs}
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    for _ in range(reps):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def square_matmul(dtype: torch.dtype, device: torch.device) -> tuple[Callable[[], object], float, int]:
    """A square matmul of this dtype, its FLOPs and size: what the cores can do at best. Time it
    interleaved with what it is the ceiling of, so that load from other processes hits both alike; a
    GPU needs 8192 rows to reach its peak, and a millisecond-long kernel for launch costs to vanish."""
    import torch

    n = 8192 if device.type == "cuda" else 2048
    a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
    a @ b
    return (lambda: a @ b), 2.0 * n**3, n


def ancestors(event: Any) -> list[str]:
    """The names of a profiler event and of the ops it runs inside, innermost first."""
    names = []
    while event is not None:
        names.append(event.name)
        event = event.cpu_parent
    return names


@contextlib.contextmanager
def busy_process() -> Iterator[None]:
    """One other CPU-bound process on the machine (a plain Python loop), as on a laptop or CI runner."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # running, and scheduled, before the timing starts
        yield
    finally:
        process.kill()
        process.wait()


def memory_status() -> dict[str, int]:
    """RSS and its anonymous and file-backed parts, in bytes, from /proc/self/status."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


class AnonymousPeak:
    """Peak anonymous memory (heap, arrays) of this process, sampled every 20 ms. Peak RSS also
    counts the pages of memory-mapped caches that were read, which the kernel can drop at will."""

    def __init__(self) -> None:
        self.peak_kib = 0
        self.stage_peak_kib = 0  # since the last :meth:`end_stage`
        self.stages: dict[str, int] = {}  # the peak of each ended stage, KiB
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, daemon=True).start()

    def end_stage(self, name: str) -> None:
        """Record the peak since the last stage ended as ``name``'s (the higher one if it recurs)."""
        self._sample()
        with self._lock:
            self.stages[name] = max(self.stages.get(name, 0), self.stage_peak_kib)
            self.stage_peak_kib = 0

    def _sample(self) -> None:
        kib = memory_status()["RssAnon"] // 1024
        with self._lock:
            self.peak_kib, self.stage_peak_kib = max(self.peak_kib, kib), max(self.stage_peak_kib, kib)

    def _watch(self) -> None:
        while True:
            self._sample()
            time.sleep(0.02)


@dataclass
class Scored:
    """One decode of a split: the length penalty, corpus BLEU/chrF over all references, and its seconds."""

    alpha: float
    bleu: float
    chrf: float
    seconds: float

    def line(self) -> str:
        return f"alpha {self.alpha:.1f}: BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  ({self.seconds:.1f} s)"


def decode_split(
    translator: Any, sources: list[str], references: list[list[str]], alpha: float, beam: int
) -> Scored:
    """``sources`` translated with ``beam`` and length penalty ``alpha``, timed and scored."""
    from seq2seq.inference.evaluation import score

    settings = replace(translator.decode_cfg, beam_size=beam, nbest=1, length_penalty=alpha)
    start = time.perf_counter()
    hypotheses = [best.text for best, *_ in translator.translate(sources, settings)]
    seconds = time.perf_counter() - start
    scores = score(hypotheses, references)
    return Scored(alpha, scores["bleu"], scores["chrf"], seconds)


def held_out_test(ckpt: Path) -> tuple[list[str], list[list[str]]]:
    """Sources and references of the test split the checkpoint's data settings give."""
    from seq2seq.data import corpus
    from seq2seq.formats.checkpoint import load_model

    splits, _ = corpus.load_splits(load_model(ckpt).data_config)
    return corpus.references(splits["test"])


def _target_value(text: str) -> tuple[str, float]:
    name, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=NUMBER") from None
    return name, int(number) if number.is_integer() else number


def bench_parser(doc: str | None, defaults: dict[str, float]) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as the description, and ``--target`` for ``defaults``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_option(parser, defaults)
    return parser


def add_target_option(parser: argparse.ArgumentParser, defaults: dict[str, float]) -> None:
    """``--target NAME=VALUE``, repeatable: the target of the ratios whose names start with NAME.
    ``defaults`` (the script's targets, by ratio name or prefix) are listed in ``--help``."""
    listed = ", ".join(f"{name}={value:g}" for name, value in defaults.items())
    parser.add_argument(
        "--target",
        action="append",
        type=_target_value,
        default=[],
        metavar="NAME=VALUE",
        help=f"a ratio's target instead of its default ({listed})",
    )
    parser.set_defaults(default_targets=defaults)


def targets(args: argparse.Namespace) -> dict[str, float]:
    """The targets of this run: those given with ``--target`` first, then the script's defaults."""
    given = dict(args.target)
    return given | {name: value for name, value in args.default_targets.items() if name not in given}


def target_for(name: str, targets: dict[str, float]) -> float:
    """The target of ratio ``name``: the first whose name is ``name`` or a prefix of it."""
    return next(value for prefix, value in targets.items() if name.startswith(prefix))


def ratio_line(name: str, value: float, target: float, digits: int = 2) -> str:
    """``RATIO <name> <value> target <t>``, the line every benchmark ends with."""
    return f"RATIO {name} {value:.{digits}f} target {target}"


def print_ratios(ratios: Iterable[tuple[str, float]], goals: dict[str, float], digits: int = 2) -> None:
    """A :func:`ratio_line` for each (name, value), against its target among ``goals``, flushed at
    once (a run's log shows them as they come)."""
    for name, value in ratios:
        print(ratio_line(name, value, target_for(name, goals), digits=digits), flush=True)


def record_commit(name: str) -> str:
    """The commit a record in docs/records/ was measured at: a baseline that stays where it was."""
    path = RECORDS / f"{name}.json"
    commit = json.loads(path.read_text()).get("commit") if path.is_file() else None
    if not commit:
        raise SystemExit(f"error: {path} names no commit")
    return commit


def machine() -> dict[str, str]:
    """A record's ``machine``: the CPU's model and its class (what ``auto`` and the kernels can use)."""
    from seq2seq.machine.hardware import cpu_class, describe, detect

    return {"cpu": detect().cpu, "class": cpu_class(describe())}


def table_record(
    name: str, machine: Any, notes: str, header: list[str], rows: list[list[str]], ratios: dict[str, float]
) -> dict[str, Any]:
    """A record of kind ``table``: the rows a page shows, how they were measured, and the ratios."""
    return {
        "kind": "table",
        "name": name,
        "machine": machine,
        "notes": notes,
        "header": header,
        "rows": rows,
        "ratios": {ratio: round(value, 3) for ratio, value in ratios.items()},
    }


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Writes ``record`` (one JSON object, as tools/docs renders the records) to ``path``."""
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
