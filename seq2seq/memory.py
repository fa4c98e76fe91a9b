"""jemalloc under training where it is installed, because glibc's malloc keeps what a step frees.

glibc serves a step's tensors from its heaps and keeps the freed space for reuse instead of
returning it, and under bf16 autocast's short-lived, variously shaped casts that space grows
through the run; jemalloc returns freed pages after a few seconds. A preloaded allocator must be
there when the process starts, so :func:`preload_jemalloc` re-executes the command with
``LD_PRELOAD`` set: the process keeps its id, so torchrun, srun and Lightning's launcher see
nothing, and its children inherit it. ``SEQ2SEQ_ALLOCATOR=system`` keeps the system's malloc.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

CHOICE = "SEQ2SEQ_ALLOCATOR"
CHOICES = ("jemalloc", "system")  # jemalloc where installed (the default), or the C library's malloc


def jemalloc_library() -> str | None:
    """The jemalloc the dynamic loader finds (Debian/Ubuntu: ``apt install libjemalloc2``), or None."""
    return ctypes.util.find_library("jemalloc")


def preloaded_environment(env: Mapping[str, str], library: str | None) -> dict[str, str] | None:
    """``env`` with ``library`` added to ``LD_PRELOAD``, or None where nothing is to be done: no
    jemalloc, ``SEQ2SEQ_ALLOCATOR=system``, or jemalloc already preloaded (so one re-execution
    ends there). An unknown choice is a one-line error."""
    choice = env.get(CHOICE, CHOICES[0])
    if choice not in CHOICES:
        raise SystemExit(f"error: {CHOICE}={choice!r}: expected one of {', '.join(CHOICES)}")
    preloaded = env.get("LD_PRELOAD", "")
    if library is None or choice == "system" or "jemalloc" in preloaded:
        return None
    return {**env, "LD_PRELOAD": f"{library}:{preloaded}" if preloaded else library}


def allocator(env: Mapping[str, str], maps: str, library: str | None) -> str:
    """Which malloc this process runs on and why, for the run's log: ``maps`` is /proc/self/maps."""
    if "libjemalloc" in maps:
        return "jemalloc (preloaded)"
    if env.get(CHOICE) == "system":
        return f"the C library's malloc ({CHOICE}=system)"
    if library is None:
        return "the C library's malloc (no jemalloc installed: see docs/troubleshooting.md, memory)"
    return "the C library's malloc (jemalloc is preloaded by train.py, not by this command)"


def allocator_in_use() -> str:
    """:func:`allocator` for this process."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: nothing is preloaded
        maps = ""
    return allocator(os.environ, maps, jemalloc_library())


def preload_jemalloc() -> None:
    """Restart this command with jemalloc preloaded where that applies; call it before torch loads."""
    env = preloaded_environment(os.environ, jemalloc_library())
    if env is not None:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
