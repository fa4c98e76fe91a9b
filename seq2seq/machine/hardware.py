"""What machine this is, which device a command runs on, and the numeric precision chosen from it.

The same config must be fast on any machine, and bf16 pays only where the hardware computes it
natively (docs/training.md, Precision): so ``precision=auto`` is read from the CPU's flags, the
GPU's compute capability and a short timing probe (:func:`choose_precision`). :func:`describe`
is the one line that every benchmark prints and every training run logs.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from seq2seq.config import ModelConfig, RunConfig
from seq2seq.machine.cpu_flags import FLAGS_THAT_MATTER, NATIVE_BF16, cpu_model_and_flags
from seq2seq.machine.memory import allocator_in_use
from seq2seq.model.int8 import INT8

log = logging.getLogger(__name__)

AUTO = "auto"
PROBE_SECONDS = 2.0  # the most the CPU bf16 probe may take
PROBE_FLOPS = 1e9  # fp32 work of one probe step: milliseconds on a CPU
INFERENCE_DTYPES = {  # --dtype: "int8" is int8 weights with float32 activations, on a CPU
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int8": INT8,
}


@dataclass(frozen=True)
class Hardware:
    """The facts the precision rule and the benchmarks' header need."""

    cpu: str  # model name, trademarks stripped
    flags: frozenset[str]  # those of FLAGS_THAT_MATTER this CPU has
    cores: int  # CPUs this process may run on
    threads: int  # torch's intra-op threads
    torch_version: str
    gpu: str | None  # name of CUDA device 0
    capability: tuple[int, int] | None  # its compute capability

    @property
    def native_bf16(self) -> bool:
        return bool(self.flags & NATIVE_BF16)


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask, e.g. under taskset or a container quota)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def threads_each(processes: int) -> int:
    """Threads for each of ``processes`` sharing this machine's cores (at least one): more would
    spend the cores waiting on each other."""
    return max(1, usable_cores() // processes)


class DeviceError(ValueError):
    """The requested device is not available."""


def resolve_device(name: str | torch.device) -> torch.device:
    """ "auto" -> the GPU when there is one, else the CPU; an unavailable GPU is an error, not a fallback."""
    if str(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"device {name!r} requested but no CUDA GPU is available; use 'cpu' or 'auto'")
    return device


def resolve_ct2_device(name: str) -> str:
    """The same rule for CTranslate2, which counts the GPUs it can use itself (its build may have none)."""
    import ctranslate2  # only a CTranslate2 export needs it

    gpus = ctranslate2.get_cuda_device_count()
    if name == "auto":
        return "cuda" if gpus else "cpu"
    if name == "cuda" and not gpus:
        raise DeviceError("device 'cuda' requested but CTranslate2 sees no CUDA GPU; use 'cpu' or 'auto'")
    return name


def device_type(accelerator: str) -> str:
    """What Lightning will train on, for the precision rule: "cuda", "cpu" or the accelerator's name."""
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return "cuda"
    return "cpu" if accelerator == "auto" else accelerator


def compile_blocker(device_type: str) -> str | None:
    """Why ``torch.compile`` cannot build its kernels on this machine, or None: its CPU backend
    compiles C++ and its GPU backend generates Triton kernels. Without them the first step would
    fail deep inside the compiler, after the run has started."""
    if device_type == "cpu":
        compilers = [name for name in (os.environ.get("CXX"), "g++", "c++", "clang++") if name]
        if not any(shutil.which(name) for name in compilers):
            return "no C++ compiler on PATH (torch.compile's CPU backend builds C++; set CXX or install g++)"
    if device_type == "cuda" and importlib.util.find_spec("triton") is None:
        return "no Triton (torch.compile's GPU backend generates Triton kernels)"
    return None


def detect() -> Hardware:
    cpu, flags = cpu_model_and_flags()
    gpu = capability = None
    if torch.cuda.is_available():
        gpu, capability = torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0)
    return Hardware(cpu, flags, usable_cores(), torch.get_num_threads(), torch.__version__, gpu, capability)


def describe(hardware: Hardware | None = None) -> str:
    """One line: CPU and flags, cores and threads, torch, GPU."""
    hw = hardware or detect()
    has = [flag for flag in FLAGS_THAT_MATTER if flag in hw.flags]
    lacks = [flag for flag in FLAGS_THAT_MATTER if flag not in hw.flags]
    flags = " ".join(has) + (f" (no {' '.join(lacks)})" if lacks else "")
    gpu = f"{hw.gpu} (compute capability {hw.capability[0]}.{hw.capability[1]})" if hw.gpu else "none"
    return (
        f"hardware: cpu {hw.cpu}, flags {flags}, {hw.cores} cores, {hw.threads} threads, "
        f"torch {hw.torch_version}, gpu {gpu}"
    )


CLASS_BY_FLAG = (  # the first flag the hardware line lists as present names the class
    ("amx_bf16", "AMX (bf16)"),
    ("avx512_bf16", "AVX512-BF16 without AMX"),
    ("avx512f", "AVX-512 without AVX512-BF16"),
    ("avx2", "AVX2 (fp32)"),
)


def cpu_class(hardware_line: str) -> str:
    """The CPU class of a :func:`describe` line: what ``auto`` and the kernels can use."""
    flags = hardware_line.split(", flags ", 1)[-1].split(",", 1)[0]
    present = set(flags.split(" (no ", 1)[0].split())
    gpu = hardware_line.rsplit(", gpu ", 1)[-1]
    if gpu != "none":
        return f"GPU: {gpu}"
    return next((name for flag, name in CLASS_BY_FLAG if flag in present), "no AVX2")


def choose_precision(
    device_type: str, hardware: Hardware, bf16_speedup: Callable[[], float]
) -> tuple[str, str]:
    """The precision ``auto`` means on a "cuda" or "cpu" device, and why: (Lightning precision, reason).

    CUDA: bf16 from compute capability 8.0, fp16 with loss scaling on 7.x, fp32 below. CPU: bf16
    only with native bf16 instructions and when ``bf16_speedup()`` (fp32 time / bf16 time of a
    probe) shows it faster; fp32 otherwise. The probe is only called when the flags allow bf16.
    """
    if device_type == "cuda":
        major, minor = hardware.capability or (0, 0)
        where = f"{hardware.gpu}, compute capability {major}.{minor}"
        if major >= 8:
            return "bf16-mixed", f"{where}: bf16 tensor cores"
        if major == 7:
            return "16-mixed", f"{where}: fp16 tensor cores, no bf16"
        return "32-true", f"{where}: no fp16/bf16 tensor cores"
    where = f"{hardware.cpu}, {hardware.threads} threads"
    if device_type != "cpu":
        return "32-true", f"{device_type}: no precision rule for it, fp32 is safe"
    if not hardware.native_bf16:
        return "32-true", f"{where}: no AVX512-BF16/AMX"
    speedup = bf16_speedup()
    if speedup > 1.0:
        return "bf16-mixed", f"{where}: native bf16, {speedup:.2f}x fp32 in the probe"
    return "32-true", f"{where}: native bf16 but {speedup:.2f}x fp32 in the probe"


def bf16_speedup(model_cfg: ModelConfig, budget_s: float = PROBE_SECONDS) -> float:
    """fp32 time / bf16-autocast time of the model's feed-forward matmuls, forward and backward.

    Tokens go through (D -> d_ff -> D), as many as make :data:`PROBE_FLOPS` (up to a training
    batch's 4,096), so one step stays short even where bf16 is emulated; repetitions alternate
    between the two dtypes and stop before ``budget_s`` would be exceeded.
    """
    rows = min(4096, max(64, int(PROBE_FLOPS / (12 * model_cfg.d_model * model_cfg.d_ff)) // 64 * 64))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, model_cfg.d_model, generator=generator)
    w_in = torch.randn(model_cfg.d_ff, model_cfg.d_model, generator=generator).requires_grad_()
    w_out = torch.randn(model_cfg.d_model, model_cfg.d_ff, generator=generator).requires_grad_()

    def step(dtype: torch.dtype) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            out = torch.relu(x @ w_in.T) @ w_out.T  # (rows, D)
        out.float().sum().backward()
        return time.perf_counter() - start

    deadline = time.perf_counter() + budget_s
    times = {dtype: [step(dtype)] for dtype in (torch.float32, torch.bfloat16)}  # warm-up
    while len(times[torch.float32]) < 6:
        pair = times[torch.float32][-1] + times[torch.bfloat16][-1]
        if time.perf_counter() + pair > deadline:
            break
        for dtype, seconds in times.items():
            seconds.append(step(dtype))
    # Past the warm-up when there was time for more (first calls pay for allocation and setup).
    fp32, bf16 = (seconds[1:] or seconds for seconds in times.values())
    return speedup_of(fp32, bf16)


def speedup_of(fp32_seconds: list[float], bf16_seconds: list[float]) -> float:
    """fp32 time / bf16 time from interleaved repetitions, each at its fastest.

    Another process on the machine only ever adds time, to whichever repetition it hits, so the
    fastest repetition is the machine's own speed: under load a median can say "bf16 slower" where
    bf16 is faster, the fastest repetitions do not (measured in docs/training.md, Precision).
    """
    return min(fp32_seconds) / min(bf16_seconds)


def resolve_precision(
    requested: str | int, model_cfg: ModelConfig, device_type: str
) -> tuple[str | int, str]:
    """``requested`` unchanged unless it is "auto"; then :func:`choose_precision` on this machine."""
    if requested != AUTO:
        return requested, "set explicitly"
    return choose_precision(device_type, detect(), lambda: bf16_speedup(model_cfg))


def precision_dtype(precision: str) -> torch.dtype:
    """The compute dtype of a Lightning precision ("bf16-mixed" -> bfloat16, "32-true" -> float32)."""
    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    return torch.float32


def resolve_dtype(requested: str, model_cfg: ModelConfig, device_type: str) -> tuple[torch.dtype, str]:
    """Inference dtype: a name from :data:`INFERENCE_DTYPES`, or "auto" for the training rule's choice."""
    if requested != AUTO:
        return INFERENCE_DTYPES[requested], "set explicitly"
    precision, reason = resolve_precision(AUTO, model_cfg, device_type)
    return precision_dtype(str(precision)), reason


def settle_machine_choices(run: RunConfig) -> tuple[RunConfig, list[str]]:
    """``run`` with this machine's choices: ``trainer.precision=auto`` replaced by a precision, so
    config.yaml and the hparams hold a value that reproduces the run elsewhere, and a
    ``compile=true`` this machine cannot honour turned into eager. Logs and returns, as lines, the
    hardware and the reasons."""
    device = device_type(str(run.trainer.get("accelerator", "auto")))
    precision, reason = resolve_precision(run.trainer["precision"], run.model, device)
    lines = [describe(), f"precision: {precision} ({reason})", f"allocator: {allocator_in_use()}"]
    compile_model = run.compile
    if run.compile:
        blocker = compile_blocker(device)
        compile_model = blocker is None
        lines.append(f"compile: {'off' if blocker else 'on'} ({blocker or 'set explicitly'})")
    for line in lines:
        log.info("%s", line)
    return replace(run, trainer={**run.trainer, "precision": precision}, compile=compile_model), lines
