"""Training's allocator: jemalloc or mimalloc where training may run in bf16 on the CPU, the C
library's malloc elsewhere, because each keeps memory flat in its own case and costs speed in the
other's.

Under bf16 autocast, a step's short-lived, variously shaped casts make glibc's heaps grow through
the run (GBs in 30 minutes), where jemalloc and mimalloc hand freed pages back. In float32, glibc
reuses what a step frees, while handing pages back costs a page fault for each page the next step
touches again (the figures: docs/performance.md, Memory). ``auto`` therefore preloads one of them on
a CPU with native bf16 instructions, the only CPUs where the precision rule can pick bf16, and keeps
malloc elsewhere: jemalloc where the system has it, else the mimalloc that the ``cmeel-mimalloc``
package (a dependency on Linux) ships, so the README's install needs no system package.

A preloaded allocator must be there when the process starts, so :func:`preload_allocator`
re-executes the command with ``LD_PRELOAD`` set: the process keeps its id, so torchrun, srun and
Lightning's launcher see nothing, and its children inherit it. ``SEQ2SEQ_ALLOCATOR`` names one of
:data:`CHOICES` to override the rule (a forced bf16 run on a CPU without native bf16 wants one).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from seq2seq.machine.cpu_flags import has_native_bf16

CHOICE = "SEQ2SEQ_ALLOCATOR"
ALLOCATORS = ("jemalloc", "mimalloc")  # auto's order of preference, on a CPU with native bf16
CHOICES = ("auto", *ALLOCATORS, "system")
MIMALLOC_PACKAGE = "cmeel-mimalloc"
# mimalloc's defaults hand freed pages back after a second, on transparent huge pages: each page
# faulted in again cost the bf16 default a quarter of its steps. Kept, its pages stay flat enough.
SETTINGS = {"mimalloc": {"MIMALLOC_PURGE_DELAY": "-1"}}  # a value in the environment wins


def jemalloc_library() -> str | None:
    """The jemalloc the dynamic loader finds (Debian/Ubuntu: ``apt install libjemalloc2``), or None."""
    return ctypes.util.find_library("jemalloc")


def mimalloc_library() -> str | None:
    """The mimalloc shared library that the ``cmeel-mimalloc`` package installed, or None."""
    try:
        files = metadata.distribution(MIMALLOC_PACKAGE).files or []
    except metadata.PackageNotFoundError:
        return None
    found = sorted(str(file.locate()) for file in files if file.name.startswith("libmimalloc.so"))
    return next((path for path in found if Path(path).is_file()), None)


def installed_allocators() -> dict[str, str | None]:
    """Each allocator of :data:`ALLOCATORS` and the path of its library, None where not installed."""
    return {"jemalloc": jemalloc_library(), "mimalloc": mimalloc_library()}


def wanted_allocators(env: Mapping[str, str], native_bf16: bool) -> tuple[str, ...]:
    """The allocators this launch should run on, best first: the choice in ``env``, or under
    ``auto`` all of them on a CPU with native bf16. An unknown choice is a one-line error."""
    choice = env.get(CHOICE, CHOICES[0])
    if choice not in CHOICES:
        raise SystemExit(f"error: {CHOICE}={choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "auto":
        return ALLOCATORS if native_bf16 else ()
    return (choice,) if choice in ALLOCATORS else ()


def preloaded_environment(
    env: Mapping[str, str], libraries: Mapping[str, str | None], native_bf16: bool
) -> dict[str, str] | None:
    """``env`` with the first wanted and installed allocator's library (``libraries``) first in
    ``LD_PRELOAD`` and its :data:`SETTINGS`, or None where nothing is to be done: none wanted
    (:func:`wanted_allocators`) or installed, or one already preloaded (so one re-execution ends
    there)."""
    preloaded = env.get("LD_PRELOAD", "")
    wanted = wanted_allocators(env, native_bf16)
    name = next((name for name in wanted if libraries.get(name)), None)
    if name is None or any(each in preloaded for each in ALLOCATORS):
        return None
    library = libraries[name]
    return {**SETTINGS.get(name, {}), **env, "LD_PRELOAD": f"{library}:{preloaded}" if preloaded else library}


def allocator(
    env: Mapping[str, str], maps: str, libraries: Mapping[str, str | None], native_bf16: bool
) -> str:
    """Which malloc this process runs on and why, for the run's log: ``maps`` is /proc/self/maps."""
    loaded = next((name for name in ALLOCATORS if f"lib{name}" in maps), None)
    if loaded:
        return f"{loaded} (preloaded)"
    if env.get(CHOICE) == "system":
        return f"the C library's malloc ({CHOICE}=system)"
    wanted = wanted_allocators(env, native_bf16)
    if not wanted:
        return "the C library's malloc (auto: no native bf16 on this CPU, so float32, where it is faster)"
    installed = [name for name in wanted if libraries.get(name)]
    if not installed:
        missing = " or ".join(wanted)
        return f"the C library's malloc (no {missing} installed: see docs/troubleshooting.md, memory)"
    return f"the C library's malloc ({installed[0]} is preloaded by train.py, not by this command)"


def hand_back_free_heap() -> None:
    """Return the C library's free heap pages to the system (``malloc_trim``), where there is one.

    Call it after a large job whose memory is gone for good, such as the BPE trainer's word tables:
    malloc keeps freed chunks in the heaps of the threads that freed them, so without it the process
    would hold that job's peak for as long as it lives. Elsewhere (another C library, a preloaded
    allocator's own heap) it does nothing."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def allocator_in_use() -> str:
    """:func:`allocator` for this process."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: nothing is preloaded
        maps = ""
    return allocator(os.environ, maps, installed_allocators(), has_native_bf16())


def preload_allocator() -> None:
    """Restart this command with the wanted allocator preloaded where that applies; call it before
    torch loads."""
    env = preloaded_environment(os.environ, installed_allocators(), has_native_bf16())
    if env is not None:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
