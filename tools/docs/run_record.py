"""A finished training run as a results record (``docs/records/*.json``), read after the fact.

Everything comes from files the run left behind: ``config.yaml`` (the resolved config, headed by the
hardware and precision lines that ``seq2seq/training/run.py`` writes), ``.hydra/overrides.yaml``,
the checkpoints' metadata (``seq2seq/formats/checkpoint.py``: steps, best validation BLEU), the TensorBoard
events (the median of ``train/tokens_per_s``, the validations) and, for test BLEU, the JSON that
``translate.py --eval test --metrics-out FILE`` writes. The commit is HEAD at record time, or null
where the files differ from it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.formats.checkpoint import KEY, read_checkpoint
from seq2seq.machine.hardware import cpu_class

ROOT = Path(__file__).resolve().parents[2]


class RecordError(Exception):
    """The run directory lacks a file a record needs."""


def header_lines(config_text: str) -> dict[str, str]:
    """The ``# hardware: ...`` and ``# precision: ...`` comments heading a run's config.yaml."""
    found = {}
    for line in config_text.splitlines():
        if not line.startswith("# "):
            break
        name, _, value = line[2:].partition(": ")
        found[name] = value
    return found


def precision_note(header_value: str | None) -> str | None:
    """Why the run trained in its precision, from the header's ``32-true (REASON)``: ``auto: REASON``
    where ``auto`` chose it, ``set explicitly`` where the config named it."""
    if not header_value or " (" not in header_value:
        return header_value
    reason = header_value.split(" (", 1)[1].removesuffix(")")
    return reason if reason == "set explicitly" else f"auto: {reason}"


def max_time_minutes(value: str | None) -> float | None:
    """Lightning's ``DD:HH:MM:SS`` as minutes."""
    if not value:
        return None
    days, hours, minutes, seconds = (int(part) for part in str(value).split(":"))
    return ((days * 24 + hours) * 60 + minutes) + seconds / 60


def model_description(model: dict[str, Any]) -> str:
    norm = "pre-norm" if model["norm_first"] else "post-norm"
    if model.get("qk_norm"):  # a key that records of earlier runs lack
        norm += ", QK-norm"
    layers = f"{model['n_encoder_layers']}+{model['n_decoder_layers']}"
    return f"d_model {model['d_model']}, {layers} layers, {model['activation']} d_ff {model['d_ff']}, {norm}"


def scalars(events: EventAccumulator, tag: str) -> list:
    return events.Scalars(tag) if tag in events.Tags()["scalars"] else []


def validations(events: EventAccumulator) -> list[dict[str, Any]]:
    """Step, minutes since the first logged scalar, val BLEU and chrF of every validation."""
    bleu, chrf = scalars(events, "val/bleu"), {e.step: e.value for e in scalars(events, "val/chrf")}
    start = min((e.wall_time for tag in events.Tags()["scalars"] for e in events.Scalars(tag)), default=0.0)
    return [
        {"step": e.step, "minutes": round((e.wall_time - start) / 60, 1), "bleu": round(e.value, 2),
         "chrf": round(chrf[e.step], 2) if e.step in chrf else None}
        for e in bleu
    ]  # fmt: skip


def test_entry(metrics_file: Path) -> dict[str, Any]:
    """One test evaluation from ``translate.py --metrics-out``'s JSON."""
    metrics = json.loads(metrics_file.read_text())
    fields = ("eval", "sentences", "beam", "compute", "bleu", "chrf", "seconds")
    return {name: metrics[name] for name in fields}


def commit() -> str | None:
    """HEAD, when the tracked files are as committed. None otherwise, since that commit would
    misname the code that ran: a tree with changes, a copy without git, or one whose git is older
    than its files (a lent GPU machine's copy named a commit from hours before its files)."""
    try:
        head, changes = (
            subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
            for args in (["rev-parse", "HEAD"], ["status", "--porcelain", "--untracked-files=no"])
        )
    except OSError:
        return None
    if head.returncode or changes.returncode or changes.stdout.strip():
        return None
    return head.stdout.strip()


def record(run_dir: Path, name: str, test_metrics: list[Path], machine: str | None = None) -> dict[str, Any]:
    """The results record of the run in ``run_dir`` (see the module docstring)."""
    config_file, best = run_dir / "config.yaml", run_dir / "checkpoints" / "best.ckpt"
    for needed in (config_file, best, run_dir / "tensorboard"):
        if not needed.exists():
            raise RecordError(f"{run_dir}: no {needed.name}; is this a finished run directory?")
    text = config_file.read_text()
    config, header = yaml.safe_load(text), header_lines(text)
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.is_file() else []
    experiment = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), None)
    best_state = read_checkpoint(best)
    last = run_dir / "checkpoints" / "last.ckpt"
    steps = read_checkpoint(last)["global_step"] if last.is_file() else best_state["global_step"]
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tokens = [e.value for e in scalars(events, "train/tokens_per_s")]
    hardware = header.get("hardware", "")
    return {
        "kind": "result",
        "name": name,
        "commit": commit(),
        "provenance": f"python -m tools.docs.results_page record {run_dir.name}",
        "experiment": experiment,
        "overrides": [o for o in overrides if not o.startswith("experiment=")],
        "model": model_description(config["model"]),
        "machine": {"cpu": machine or hardware.removeprefix("cpu ").split(", flags")[0] or None,
                    "class": cpu_class(hardware) if hardware else None,
                    "hardware_line": f"hardware: {hardware}" if hardware else None},
        "precision": config["trainer"]["precision"],
        "precision_note": precision_note(header.get("precision")),
        "steps": steps,
        "best_step": best_state["global_step"],
        "minutes": max_time_minutes(config["trainer"].get("max_time")),
        "tokens_per_s": round(statistics.median(tokens)) if tokens else None,
        "tokens_per_s_stat": "median" if tokens else None,
        "val_bleu": round(best_state[KEY]["best_bleu"], 2),
        "test": [test_entry(path) for path in test_metrics],
        "validations": validations(events),
        "tables": {},
    }  # fmt: skip
