"""Where a training step of the default recipe spends its time, grouped, from torch.profiler.

(a) the bare step: the default recipe's model (composed as ``train.py`` composes it, dropout off as
    its 30-minute budget sets it) on batches of the real training loader: forward, loss, backward,
    gradient clipping and AdamW, as ``bench/lib/training_step.py`` takes it;
(b) the step inside the real loop (``bench/lib/loop_run.py``: ``train.py``'s Trainer, module, data
    module, EMA, logging and callbacks), ``--loop-steps`` steps timed without the profiler, then as
    many profiled.

Every op's self time goes to one group. An op inside the data loader's ``__next__``, an optimizer's
``step``/``zero_grad``, or the EMA's ``lerp`` counts as data, optimizer or EMA (gradient clipping's
``foreach`` norms and scaling as optimizer); then by its own name, casts and copies (``copy_``,
``_to_copy``, ``clone``); anything inside scaled-dot-product attention, forward or backward, as
attention; matrix products as matmul; LayerNorm forward and backward as norms; the label-smoothed
loss's own work as loss; every other ATen op as elementwise. Framework is the rest of the wall time:
Python, Lightning's hooks and logging, autograd's bookkeeping, the profiler's own cost. Prints a
Markdown table (ms per step and share of the step, both parts), and the unprofiled ms per step.

``--device cuda`` profiles (b) on the GPU, the GPU recipe as ``train.py`` runs it there, with CUDA
activity: the wall time per step against the time the GPU spent in kernels (how busy the loop
keeps it), the calls that make the host wait for the device, per step, and the kernels that take
the GPU's time.

    python -m bench.train.step_profile [--dtype fp32|bf16|auto] [--steps 3] [--loop-steps 10]
        [--part bare loop]
                                 [--set KEY=VALUE ...]
    python -m bench.train.step_profile --device cuda [--loop-steps 20] [--warmup 30] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import seq2seq.machine.threads  # noqa: F401  (OpenMP's wait policy as in training: before torch loads)

# isort: split
import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile

from bench.lib.loop_run import compose_default, run_loop, with_recipe
from bench.lib.measure import ROOT, ancestors
from bench.lib.training_step import ours_loss, train_step_fn
from seq2seq.config import DataConfig, ModelConfig, validated
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.machine.hardware import describe, precision_dtype, resolve_precision
from seq2seq.model import Transformer

GROUPS = (
    "matmul",
    "attention",
    "norms",
    "elementwise",
    "casts",
    "loss",
    "optimizer",
    "EMA",
    "data",
    "framework",
)
PHASES = (  # ranges whose ops belong to one group, whatever the op, unless nearer a MODEL range
    ("data", ("enumerate(DataLoader)",)),
    ("optimizer", ("Optimizer.step", "Optimizer.zero_grad")),
)
MODEL = "training_step_and_backward"  # Lightning runs these inside Optimizer.step (the closure)
CASTS = {"aten::copy_", "aten::_to_copy", "aten::to", "aten::clone", "aten::_copy_from_and_resize"}
# addmm_: the loss's weight gradient, accumulated in place chunk by chunk
MATMULS = {f"aten::{op}" for op in ("mm", "addmm", "addmm_", "bmm", "baddbmm", "matmul", "linear")}
ATTENTION = ("scaled_dot_product", "ScaledDotProduct")
NORMS = ("layer_norm", "LayerNorm")
LOSS = ("SmoothedCrossEntropy",)  # in the name of every version's loss Function, forward and backward
PRECISIONS = {"fp32": "32-true", "bf16": "bf16-mixed", "auto": "auto"}
# Calls after which the host waits for the GPU: reading a device value, and explicit waits.
HOST_WAITS = (
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
)


def group_of(event: FunctionEvent) -> str:
    """The group an event's self time counts to (see the module docstring for the order)."""
    names, name = ancestors(event), event.name

    def inside(parts: tuple[str, ...]) -> bool:
        return any(part in ancestor for ancestor in names for part in parts)

    for ancestor in names:  # the nearest phase decides
        if ancestor == MODEL:
            break
        phase = next((group for group, prefixes in PHASES if ancestor.startswith(prefixes)), None)
        if phase is not None:
            return phase
    if "aten::_foreach_lerp_" in names:  # on a CPU, foreach ops run tensor by tensor, as children
        return "EMA"
    if any(ancestor.startswith("aten::_foreach_") for ancestor in names):
        return "optimizer"  # gradient clipping
    if name in CASTS:
        return "casts"
    if inside(ATTENTION):
        return "attention"
    if name in MATMULS:
        return "matmul"
    if inside(NORMS):
        return "norms"
    if inside(LOSS):
        return "loss"
    return "elementwise" if name.startswith("aten::") else "framework"


@dataclass
class Split:
    """Milliseconds per step by group, from one profiled window, and the unprofiled step time."""

    ms: dict[str, float] = field(default_factory=dict)
    unprofiled_ms: float = 0.0

    @classmethod
    def of(cls, prof: profile, wall_s: float, steps: int, unprofiled_s: float) -> Split:
        us = dict.fromkeys(GROUPS, 0.0)
        for event in prof.events():
            us[group_of(event)] += event.self_cpu_time_total
        us["framework"] += max(0.0, wall_s * 1e6 - sum(us.values()))  # time outside every recorded op
        return cls({group: value / 1e3 / steps for group, value in us.items()}, 1e3 * unprofiled_s / steps)


def data_and_model(cfg: Any) -> tuple[list[Any], Transformer]:
    """Batches of the real training loader (the loop's first ones) and the recipe's model, dropout off."""
    data_cfg = validated(DataConfig, cfg.data, "data")
    datamodule = TranslationDataModule(replace(data_cfg, num_workers=0), seed=cfg.seed)
    datamodule.setup("fit")
    model_cfg = validated(ModelConfig, cfg.model, "model")
    tokenizer = datamodule.tokenizer
    torch.manual_seed(cfg.seed)
    model = Transformer(replace(model_cfg, dropout=0.0), tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    return list(datamodule.train_dataloader()), model


def profile_bare(cfg: Any, dtype: torch.dtype, steps: int) -> Split:
    """(a) ``steps`` bare steps timed, then the same steps profiled (after one warm-up step)."""
    batches, model = data_and_model(cfg)
    batches = batches[: steps + 1]
    step = train_step_fn(model, ours_loss, dtype)
    step(batches[0])
    start = time.perf_counter()
    for batch in batches[1:]:
        step(batch)
    unprofiled = time.perf_counter() - start
    with profile() as prof:
        start = time.perf_counter()
        for batch in batches[1:]:
            step(batch)
        wall = time.perf_counter() - start
    return Split.of(prof, wall, steps, unprofiled)


def _labelled(method: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.profiler.record_function(MODEL):
            return method(*args, **kwargs)

    return run


class ProfiledWindow(pl.Callback):
    """After ``warmup`` steps, times ``steps`` steps, then profiles as many and stops the run; with
    ``cuda``, the profile records the GPU's kernels too."""

    def __init__(self, warmup: int, steps: int, cuda: bool = False) -> None:
        self.warmup, self.steps, self.cuda = warmup, steps, cuda
        self.marks: dict[str, float] = {}
        self.prof: profile | None = None
        self.split: Split | None = None
        self.gpu_lines: list[str] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Labels the module's training step and backward, which Lightning calls from the optimizer's step."""
        for name in ("training_step", "backward"):
            setattr(pl_module, name, _labelled(getattr(pl_module, name)))

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        step, now = trainer.global_step, time.perf_counter()
        if step == self.warmup:
            self.marks["timed"] = now
        elif step == self.warmup + self.steps:
            self.marks["unprofiled"] = now - self.marks["timed"]
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self.prof = profile(activities=activities)
            self.prof.__enter__()
            self.marks["profiled"] = time.perf_counter()
        elif step == self.warmup + 2 * self.steps:
            if self.cuda:
                torch.cuda.synchronize()
                now = time.perf_counter()
            self.prof.__exit__(None, None, None)
            wall = now - self.marks["profiled"]
            self.split = Split.of(self.prof, wall, self.steps, self.marks["unprofiled"])
            if self.cuda:
                self.gpu_lines = gpu_summary(self.prof, wall, self.steps, self.marks["unprofiled"])
            trainer.should_stop = True


def gpu_summary(prof: profile, wall_s: float, steps: int, unprofiled_s: float) -> list[str]:
    """How busy the profiled steps kept the GPU, what made the host wait, and the kernels' time."""
    kernels: dict[str, float] = {}
    waits = dict.fromkeys(HOST_WAITS, 0)
    for event in prof.events():
        if event.device_type == DeviceType.CUDA and not event.is_user_annotation:  # kernels, not labels
            kernels[event.name] = kernels.get(event.name, 0.0) + event.self_device_time_total
        elif event.name in waits:
            waits[event.name] += 1
    busy_ms = sum(kernels.values()) / 1e3 / steps
    wall_ms = 1e3 * wall_s / steps
    lines = [
        f"GPU: {wall_ms:.1f} ms/step profiled ({1e3 * unprofiled_s / steps:.1f} unprofiled), "
        f"kernels {busy_ms:.1f} ms/step: the GPU busy {100 * busy_ms / max(wall_ms, 1e-9):.0f} % of the step",
        "host waits per step: " + ", ".join(f"{name} {count / steps:g}" for name, count in waits.items()),
        "| kernel | ms/step | share of kernel time |",
        "|---|---:|---:|",
    ]
    for name, us in sorted(kernels.items(), key=lambda item: -item[1])[:12]:
        lines.append(f"| {name[:90]} | {us / 1e3 / steps:.2f} | {100 * us / 1e3 / steps / busy_ms:.1f} % |")
    if not kernels:
        lines.append("| (no kernel recorded) | 0 | |")
    return lines


def profile_loop(overrides: list[str], warmup: int, steps: int, cuda: bool = False) -> ProfiledWindow:
    """(b) the real loop, in this process; the window holds the split (and the GPU's summary)."""
    window = ProfiledWindow(warmup, steps, cuda)
    with tempfile.TemporaryDirectory(prefix="profile-") as output_dir:
        run_loop(ROOT, with_recipe(overrides), [window], Path(output_dir))
    if window.split is None:
        sys.exit(f"error: the run ended before {warmup + 2 * steps} steps")
    return window


def table(splits: dict[str, Split]) -> list[str]:
    """The Markdown table: per group, ms per step and share of the step for each part."""
    head = "| group | " + " | ".join(f"{part}: ms/step | share" for part in splits) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(splits)]
    rows: list[tuple[str, Callable[[Split], float]]] = [
        (group, lambda s, g=group: s.ms[g]) for group in GROUPS
    ]
    rows.append(("total (profiled)", lambda s: sum(s.ms.values())))
    for label, value in rows:
        cells = []
        for split in splits.values():
            total = sum(split.ms.values())
            cells.append(f"{value(split):,.1f} | {100 * value(split) / total:.1f} %")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(
        "| unprofiled ms/step | " + " | ".join(f"{s.unprofiled_ms:,.1f} | " for s in splits.values()) + " |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dtype", choices=sorted(PRECISIONS), default="auto", help="as trainer.precision")
    parser.add_argument("--steps", type=int, default=3, help="(a) bare steps timed, then profiled")
    parser.add_argument("--loop-steps", type=int, default=10, help="(b) loop steps timed, then profiled")
    parser.add_argument("--warmup", type=int, default=3, help="(b) loop steps before those")
    parser.add_argument("--part", nargs="+", choices=["bare", "loop"], default=["bare", "loop"])
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="Hydra overrides")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: (b) on the GPU")
    args = parser.parse_args()
    print(describe())
    if args.device == "cuda":  # the GPU recipe, its precision chosen as train.py chooses it there
        window = profile_loop(args.set, args.warmup, args.loop_steps, cuda=True)
        print("\n".join([*table({"loop step": window.split}), "", *window.gpu_lines]))
        return
    cfg = compose_default([*args.set, f"trainer.precision={PRECISIONS[args.dtype]}"])
    precision, reason = resolve_precision(
        cfg.trainer.precision, validated(ModelConfig, cfg.model, "model"), "cpu"
    )
    print(f"precision: {precision} ({reason})")
    overrides = [*args.set, f"trainer.precision={precision}"]  # the loop need not probe again
    splits = {}
    if "bare" in args.part:
        splits["bare step"] = profile_bare(cfg, precision_dtype(str(precision)), args.steps)
    if "loop" in args.part:
        splits["loop step"] = profile_loop(overrides, args.warmup, args.loop_steps).split
    print("\n".join(table(splits)))


if __name__ == "__main__":
    main()
