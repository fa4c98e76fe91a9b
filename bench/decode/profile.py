"""Where a batched beam search over a checkpoint's test split spends its time, grouped, from torch.profiler.

The checkpoint's test split (or its first ``--sentences``) goes through the Translator as
``translate.py`` sends it (token-budget batches, the checkpoint's decoding settings, ``--beam``), once
as a warm-up, once timed without the profiler (with the process's page faults), once profiled.

Every op's self time goes to one group, first match wins: anything under ``model.encode`` is the
encoder; the target embedding's lookup is decoder elementwise work; copies (``copy_``,
``index_select``, ``cat``, ...) of 4-D tensors, or inside an op on one, are cache copies and
reorders; other copies inside the decoder step are casts; a matrix product with a vocabulary-sized
operand is the output projection; any other op on a 4-D tensor (the (B, H, T, D/H) layout), or
inside one, is attention; other matrix products are decoder matmuls; an op whose last dimension is
the vocabulary or a multiple of it (log-softmax, the beam-score add, top-k over the beams) is
vocabulary work; fresh tensors (``empty``, ``zeros``, ``full``, ...) are allocation; other ops
inside the decoder step are the decoder's elementwise work (norms, activations, residuals) and
outside it search bookkeeping. Framework is the rest of the wall time: Python, the profiler's own
cost. Rows per step counts the rows the output projection
scores (beams of live sentences), steps the decoder steps. The matrix products' FLOPs (the
profiler's count) over the unprofiled seconds, against a square matmul of the compute dtype timed
in the same process, give the share of the matmul ceiling the search reaches.

    python -m bench.decode.profile --ckpt best.ckpt [--dtype auto|float32|bfloat16] [--beam 5]
                                   [--sentences 500]
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import profile, record_function

from bench.lib.measure import ancestors, median_times, square_matmul
from seq2seq.data import corpus
from seq2seq.inference.backends import open_model
from seq2seq.inference.translator import Translator
from seq2seq.machine.hardware import AUTO, INFERENCE_DTYPES, describe
from seq2seq.model.int8 import INT8

GROUPS = (
    "encoder",
    "decoder matmuls",
    "output projection",
    "attention",
    "cache copies and reorders",
    "casts",
    "decoder elementwise",
    "vocabulary",
    "search bookkeeping",
    "allocation",
    "framework",
)
ENCODE, STEP = "encode", "decoder step"  # record_function labels put on the model's methods
COPIES = {
    f"aten::{op}"
    for op in (
        "copy_",
        "_to_copy",
        "to",
        "clone",
        "contiguous",
        "index_select",
        "cat",
        "index",
        "index_put_",
        "_index_put_impl_",
        "index_copy_",
        "gather",
        "_copy_from_and_resize",
    )
}
MATMULS = {f"aten::{op}" for op in ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear")}
COUNTED_MATMULS = {f"aten::{op}" for op in ("mm", "addmm", "bmm", "baddbmm")}  # FLOPs counted
PROFILED_DTYPES = [name for name, dtype in INFERENCE_DTYPES.items() if dtype != INT8]
ALLOCATIONS = {f"aten::{op}" for op in ("empty", "empty_strided", "empty_like", "zeros", "full", "new_empty")}


def _shapes(event: FunctionEvent) -> list[list[int]]:
    return [shape for shape in (event.input_shapes or []) if isinstance(shape, list) and shape]


def _four_d(event: FunctionEvent) -> bool:
    """Whether the op, or an op it runs inside, takes a (B, H, T, D/H) tensor (attention's layout)."""
    while event is not None and event.name.startswith("aten::"):
        if any(len(shape) == 4 for shape in _shapes(event)):
            return True
        event = event.cpu_parent
    return False


def group_of(event: FunctionEvent, vocab: int) -> str:
    """The group an event's self time counts to (see the module docstring for the order)."""
    names, name, shapes = ancestors(event), event.name, _shapes(event)
    in_step, four_d = STEP in names, _four_d(event)
    if ENCODE in names:
        return "encoder"
    if "aten::embedding" in names:  # its index_select is a lookup, not a copy of the cache
        return "decoder elementwise"
    if name in COPIES:
        if four_d:
            return "cache copies and reorders"
        if in_step:
            return "casts"
    if name in MATMULS and any(vocab in shape for shape in shapes):
        return "output projection"
    if four_d:
        return "attention"
    if name in MATMULS:
        return "decoder matmuls"
    if any(shape[-1] and shape[-1] % vocab == 0 for shape in shapes):  # (N, V) or beams' (n, K·V)
        return "vocabulary"
    if name in ALLOCATIONS:
        return "allocation"
    if not name.startswith("aten::"):
        return "framework"
    return "decoder elementwise" if in_step else "search bookkeeping"


def _labelled(method: Callable[..., Any], label: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        with record_function(label):
            return method(*args, **kwargs)

    return run


@dataclass
class Profile:
    """One profiled search: milliseconds by group, and what the unprofiled search did."""

    ms: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0  # unprofiled wall time
    steps: int = 0
    rows: int = 0  # rows scored over all steps
    minor_faults: int = 0
    major_faults: int = 0
    matmul_flops: float = 0.0
    ceiling: float = 0.0  # FLOP/s of a square matmul in the compute dtype

    def lines(self, sentences: int) -> list[str]:
        """The Markdown table (ms per search, ms per step, share) and the counts."""
        total, rate = sum(self.ms.values()), self.matmul_flops / self.seconds
        out = ["| group | ms | ms/step | share |", "|---|---:|---:|---:|"]
        for group, ms in self.ms.items():
            out.append(f"| {group} | {ms:,.1f} | {ms / self.steps:.3f} | {100 * ms / total:.1f} % |")
        out.append(f"| total (profiled) | {total:,.1f} | {total / self.steps:.3f} | 100 % |")
        out += [
            f"unprofiled: {self.seconds:.2f} s for {sentences} sentences ({sentences / self.seconds:.0f}/s)",
            f"steps: {self.steps}, rows per step: {self.rows / self.steps:.1f}",
            f"page faults: {self.minor_faults} minor, {self.major_faults} major",
            f"matrix products: {self.matmul_flops / 1e9:,.1f} GFLOP, {rate / 1e9:.1f} GFLOP/s unprofiled:"
            f" {100 * rate / self.ceiling:.1f} % of the matmul ceiling ({self.ceiling / 1e9:.0f} GFLOP/s)",
        ]
        return out


def matmul_ceiling(dtype: torch.dtype, reps: int = 5) -> float:
    """FLOP/s of a square matmul in ``dtype`` on this CPU (median of ``reps``)."""
    run, flops, _ = square_matmul(dtype, torch.device("cpu"))
    return flops / median_times({"matmul": run}, reps)["matmul"]


def _faults() -> tuple[int, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt, usage.ru_majflt


def profile_search(translator: Translator, sources: list[str], beam: int) -> Profile:
    """Warm-up, an unprofiled search (time, page faults, steps and rows), then a profiled one."""
    model = translator.model
    settings = replace(translator.decode_cfg_with(beam=beam), nbest=1)
    counts = {"steps": 0, "rows": 0}

    def count(_: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        counts["steps"] += 1
        counts["rows"] += inputs[0].numel() // inputs[0].size(-1)  # (rows, 1, D) or (rows, D)

    list(translator.translate(sources[:50], settings))
    hook = model.generator.register_forward_pre_hook(count)
    faults = _faults()
    start = time.perf_counter()
    list(translator.translate(sources, settings))
    seconds = time.perf_counter() - start
    minor, major = (after - before for after, before in zip(_faults(), faults, strict=True))
    hook.remove()
    model.encode, model.step = (
        _labelled(model.encode, ENCODE),
        _labelled(model.step, STEP),
    )  # instance attributes
    try:
        with profile(record_shapes=True, with_flops=True) as prof:
            start = time.perf_counter()
            list(translator.translate(sources, settings))
            wall = time.perf_counter() - start
    finally:
        del model.encode, model.step
    vocab = model.generator.out_features
    us = dict.fromkeys(GROUPS, 0.0)
    flops = 0.0
    for event in prof.events():
        us[group_of(event, vocab)] += event.self_cpu_time_total
        flops += (event.flops or 0) if event.name in COUNTED_MATMULS else 0
    us["framework"] += max(0.0, wall * 1e6 - sum(us.values()))  # time outside every recorded op
    ms = {group: value / 1e3 for group, value in us.items()}
    ceiling = matmul_ceiling(translator.dtype)
    return Profile(ms, seconds, counts["steps"], counts["rows"], minor, major, flops, ceiling)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ckpt", type=Path, required=True)
    parser.add_argument(
        "--dtype",
        choices=[AUTO, *PROFILED_DTYPES],
        default=AUTO,
        help="int8 is not profiled: its products are FBGEMM calls whose FLOPs and operands the profiler "
        "does not report, so the groups and the matmul ceiling would not apply",
    )
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--sentences", type=int, help="the first N of the test split (default: all)")
    args = parser.parse_args()
    print(describe())
    translator, facts, why = open_model(args.ckpt, device="cpu", dtype=args.dtype)
    print(f"compute: {translator.compute} ({why}), {torch.get_num_threads()} threads, beam {args.beam}")
    splits, _ = corpus.load_splits(facts.data_config)
    sources = corpus.references(splits["test"])[0][: args.sentences]
    print("\n".join(profile_search(translator, sources, args.beam).lines(len(sources))))


if __name__ == "__main__":
    main()
