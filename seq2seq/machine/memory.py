"""Training's allocator: jemalloc where training may run in bf16 on the CPU, the C library's
malloc elsewhere, because each keeps memory flat in its own case and costs speed in the other's.

Under bf16 autocast, a step's short-lived, variously shaped casts make glibc's heaps grow through
the run, where jemalloc hands freed pages back. In float32, glibc reuses what a step frees, while
jemalloc's handing back costs a page fault for each page the next step touches again (the figures:
docs/performance.md, Memory). ``auto`` therefore preloads jemalloc on a CPU with native bf16
instructions, the only CPUs where the precision rule picks bf16, and keeps malloc elsewhere.

A preloaded allocator must be there when the process starts, so :func:`preload_jemalloc`
re-executes the command with ``LD_PRELOAD`` set: the process keeps its id, so torchrun, srun and
Lightning's launcher see nothing, and its children inherit it. ``SEQ2SEQ_ALLOCATOR=jemalloc`` or
``=system`` overrides the rule (a forced bf16 run on a CPU without native bf16 wants jemalloc).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from seq2seq.machine.cpu_flags import has_native_bf16

CHOICE = "SEQ2SEQ_ALLOCATOR"
CHOICES = ("auto", "jemalloc", "system")  # auto: jemalloc on a CPU with native bf16, else malloc


def jemalloc_library() -> str | None:
    """The jemalloc the dynamic loader finds (Debian/Ubuntu: ``apt install libjemalloc2``), or None."""
    return ctypes.util.find_library("jemalloc")


def wants_jemalloc(env: Mapping[str, str], native_bf16: bool) -> bool:
    """Whether this launch should run on jemalloc: the choice in ``env``, or under ``auto`` whether
    the CPU has native bf16. An unknown choice is a one-line error."""
    choice = env.get(CHOICE, CHOICES[0])
    if choice not in CHOICES:
        raise SystemExit(f"error: {CHOICE}={choice!r}: expected one of {', '.join(CHOICES)}")
    return choice == "jemalloc" or (choice == "auto" and native_bf16)


def preloaded_environment(
    env: Mapping[str, str], library: str | None, native_bf16: bool
) -> dict[str, str] | None:
    """``env`` with ``library`` added to ``LD_PRELOAD``, or None where nothing is to be done: jemalloc
    not wanted (:func:`wants_jemalloc`) or not installed, or already preloaded (so one re-execution
    ends there)."""
    preloaded = env.get("LD_PRELOAD", "")
    if not wants_jemalloc(env, native_bf16) or library is None or "jemalloc" in preloaded:
        return None
    return {**env, "LD_PRELOAD": f"{library}:{preloaded}" if preloaded else library}


def allocator(env: Mapping[str, str], maps: str, library: str | None, native_bf16: bool) -> str:
    """Which malloc this process runs on and why, for the run's log: ``maps`` is /proc/self/maps."""
    if "libjemalloc" in maps:
        return "jemalloc (preloaded)"
    if env.get(CHOICE) == "system":
        return f"the C library's malloc ({CHOICE}=system)"
    if not wants_jemalloc(env, native_bf16):
        return "the C library's malloc (auto: no native bf16 on this CPU, so float32, where it is faster)"
    if library is None:
        return "the C library's malloc (no jemalloc installed: see docs/troubleshooting.md, memory)"
    return "the C library's malloc (jemalloc is preloaded by train.py, not by this command)"


def hand_back_free_heap() -> None:
    """Return the C library's free heap pages to the system (``malloc_trim``), where there is one.

    Call it after a large job whose memory is gone for good, such as the BPE trainer's word tables:
    malloc keeps freed chunks in the heaps of the threads that freed them, so without it the process
    would hold that job's peak for as long as it lives. Elsewhere (another C library, jemalloc's own
    heap) it does nothing."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def allocator_in_use() -> str:
    """:func:`allocator` for this process."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: nothing is preloaded
        maps = ""
    return allocator(os.environ, maps, jemalloc_library(), has_native_bf16())


def preload_jemalloc() -> None:
    """Restart this command with jemalloc preloaded where that applies; call it before torch loads."""
    env = preloaded_environment(os.environ, jemalloc_library(), has_native_bf16())
    if env is not None:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
