"""Classes of CPU faked for the precision rule, so that any machine checks what any other would choose.

``auto`` depends on the CPU's flags and on a timing probe; faking both makes the rule's outcome a
fact of the test, not of the machine that runs it. The bf16 class's probe answers 1.5, the speed-up
measured on AMD EPYC with AVX512-BF16 (docs/performance.md); its flags are never probed when absent.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from seq2seq.machine import hardware

CPU_CLASSES = {  # name -> (flags, bf16 probe's speed-up, what `auto` then gives a CPU run, and inference)
    "bf16": (frozenset({"avx2", "avx512f", "avx512_bf16"}), 1.5, "bf16-mixed", torch.bfloat16),
    "no-bf16": (frozenset({"avx2"}), None, "32-true", torch.float32),
}


def fake_cpu(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make :func:`seq2seq.machine.hardware.detect` and its bf16 probe answer as a CPU of class ``name``."""
    flags, speedup, _, _ = CPU_CLASSES[name]
    real = hardware.detect()
    faked = replace(real, cpu=f"{real.cpu} (faked: {name} CPU)", flags=flags)
    monkeypatch.setattr(hardware, "detect", lambda: faked)
    monkeypatch.setattr(hardware, "bf16_speedup", lambda *args, **kwargs: speedup)
