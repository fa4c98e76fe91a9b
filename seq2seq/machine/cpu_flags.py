"""The CPU's model and the instruction-set flags the precision rule reads, from /proc/cpuinfo.

Kept apart from :mod:`seq2seq.machine.hardware`, and free of torch, because the launch reads them too:
``train.py`` picks its allocator (:mod:`seq2seq.machine.memory`) before torch loads.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

FLAGS_THAT_MATTER = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
NATIVE_BF16 = frozenset({"avx512_bf16", "amx_bf16"})  # bf16 dot products in hardware


def parse_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """CPU model name (trademarks dropped) and the flags that matter, from /proc/cpuinfo's text."""
    fields = dict(re.findall(r"^(model name|flags)\s*:[ \t]*(.*)$", text, re.MULTILINE))
    name = re.sub(r"\((R|TM|tm)\)|\bCPU\b|\s+Processor\b", "", fields.get("model name", platform.machine()))
    flags = frozenset(fields.get("flags", "").split()) & frozenset(FLAGS_THAT_MATTER)
    return " ".join(name.split()), flags


def cpu_model_and_flags() -> tuple[str, frozenset[str]]:
    """From /proc/cpuinfo on Linux; elsewhere the platform's name and no flags (so fp32 on a CPU)."""
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        return platform.processor() or platform.machine(), frozenset()


def has_native_bf16() -> bool:
    """Whether this CPU does bf16 dot products in hardware (:data:`NATIVE_BF16`)."""
    return bool(cpu_model_and_flags()[1] & NATIVE_BF16)
