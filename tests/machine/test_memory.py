"""Training's allocator: jemalloc or mimalloc preloaded on a CPU with native bf16, malloc elsewhere,
any of them on request; evaluation loads without a worker process; freed heap handed back."""

import ctypes
import subprocess
import sys
from dataclasses import replace

import pytest

from seq2seq.config import DataConfig
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.machine.cpu_flags import has_native_bf16
from seq2seq.machine.memory import (
    CHOICE,
    allocator,
    installed_allocators,
    jemalloc_library,
    mimalloc_library,
    preloaded_environment,
)

JEMALLOC = "libjemalloc.so.2"
MIMALLOC = "/venv/lib/python3.11/site-packages/cmeel.prefix/lib/libmimalloc.so.3"
BOTH = {"jemalloc": JEMALLOC, "mimalloc": MIMALLOC}
MIMALLOC_ONLY = {"jemalloc": None, "mimalloc": MIMALLOC}
NEITHER = {"jemalloc": None, "mimalloc": None}


def test_jemalloc_goes_first_in_ld_preload_on_a_cpu_with_native_bf16() -> None:
    assert preloaded_environment({"HOME": "/h"}, BOTH, True) == {"HOME": "/h", "LD_PRELOAD": JEMALLOC}
    assert preloaded_environment({"LD_PRELOAD": "libx.so"}, BOTH, True)["LD_PRELOAD"] == f"{JEMALLOC}:libx.so"
    assert preloaded_environment({CHOICE: "system"}, BOTH, True) is None


def test_without_jemalloc_the_packaged_mimalloc_is_preloaded_keeping_its_pages() -> None:
    """The README's install brings mimalloc (cmeel-mimalloc); jemalloc needs a system package.
    mimalloc keeps the pages it frees unless the environment says otherwise."""
    kept = {"MIMALLOC_PURGE_DELAY": "-1"}
    assert preloaded_environment({}, MIMALLOC_ONLY, True) == {**kept, "LD_PRELOAD": MIMALLOC}
    chosen = {CHOICE: "mimalloc", "MIMALLOC_PURGE_DELAY": "100"}
    assert preloaded_environment(chosen, BOTH, True) == {**chosen, "LD_PRELOAD": MIMALLOC}


def test_a_cpu_without_native_bf16_keeps_malloc_unless_an_allocator_is_chosen() -> None:
    """There training runs in float32, where handing pages back costs steps."""
    assert preloaded_environment({}, BOTH, False) is None
    assert preloaded_environment({CHOICE: "auto"}, BOTH, False) is None
    chosen = {CHOICE: "jemalloc"}
    assert preloaded_environment(chosen, BOTH, False) == {**chosen, "LD_PRELOAD": JEMALLOC}


def test_nothing_to_do_without_an_allocator_or_once_one_is_preloaded() -> None:
    assert preloaded_environment({}, NEITHER, True) is None
    assert preloaded_environment({CHOICE: "jemalloc"}, MIMALLOC_ONLY, True) is None  # as chosen, or none
    assert preloaded_environment({"LD_PRELOAD": JEMALLOC}, BOTH, True) is None  # no second restart
    assert preloaded_environment({"LD_PRELOAD": MIMALLOC}, BOTH, True) is None


def test_an_unknown_choice_is_a_one_line_error() -> None:
    expected = f"error: {CHOICE}='tcmalloc': expected one of auto, jemalloc, mimalloc, system"
    with pytest.raises(SystemExit, match=expected):
        preloaded_environment({CHOICE: "tcmalloc"}, BOTH, True)


def test_the_package_that_the_install_brings_has_its_library() -> None:
    """pyproject.toml's cmeel-mimalloc on Linux: the path it reports is a loadable library."""
    library = mimalloc_library()
    assert library is not None and installed_allocators()["mimalloc"] == library
    ctypes.CDLL(library)


def _mapped_libraries(choice: str) -> str:
    """The memory map of a process that imports ``seq2seq.machine.use_allocator`` first, as train.py does."""
    code = "import seq2seq.machine.use_allocator; print(open('/proc/self/maps').read())"
    env = {"PATH": "/usr/bin:/bin", CHOICE: choice}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout


def test_the_launch_restarts_under_mimalloc_and_the_system_choice_keeps_malloc() -> None:
    assert "libmimalloc" in _mapped_libraries("mimalloc")
    assert "libmimalloc" not in _mapped_libraries("system")
    assert ("lib" + ("jemalloc" if jemalloc_library() else "mimalloc") in _mapped_libraries("auto")) == (
        has_native_bf16()
    )


@pytest.mark.skipif(jemalloc_library() is None, reason="jemalloc is not installed")
def test_the_launch_restarts_under_jemalloc_where_installed() -> None:
    assert "libjemalloc" in _mapped_libraries("jemalloc")
    assert "libjemalloc" not in _mapped_libraries("system")


def test_evaluation_loads_in_process_whatever_the_training_workers(tiny_data_cfg: DataConfig) -> None:
    """A validation worker would be a fork of the training process, grown by then to its largest."""
    datamodule = TranslationDataModule(replace(tiny_data_cfg, num_workers=1))
    datamodule.setup("fit")
    assert datamodule.train_dataloader().num_workers == 1
    assert datamodule.val_dataloader().num_workers == 0
    assert datamodule.test_dataloader().num_workers == 0


def test_the_run_log_says_which_allocator_runs_and_why() -> None:
    maps = f"7f00-7f01 r-xp 0 0:0 0 /usr/lib/x86_64-linux-gnu/{JEMALLOC}\n"
    assert allocator({}, maps, BOTH, True) == "jemalloc (preloaded)"
    assert allocator({}, f"7f00-7f01 r-xp 0 0:0 0 {MIMALLOC}\n", BOTH, True) == "mimalloc (preloaded)"
    assert allocator({CHOICE: "system"}, "", BOTH, True).endswith(f"({CHOICE}=system)")
    assert "no native bf16" in allocator({}, "", BOTH, False)
    assert "no jemalloc or mimalloc installed" in allocator({}, "", NEITHER, True)
    assert "mimalloc is preloaded by train.py" in allocator({}, "", MIMALLOC_ONLY, True)


_FREED_HEAP = """
import ctypes
from seq2seq.machine.memory import hand_back_free_heap

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]

def anonymous_kib():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("RssAnon:"))

chunks = [libc.malloc(4096) for _ in range(50_000)]  # 200 MiB of small chunks, in the heap
for chunk in chunks:
    ctypes.memset(chunk, 1, 4096)
for chunk in chunks[:-1]:  # the last one stays, so the heap's top cannot shrink by itself
    libc.free(chunk)
kept = anonymous_kib()
hand_back_free_heap()
print(kept, anonymous_kib())
"""


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "malloc_trim"), reason="no glibc malloc_trim")
def test_freed_heap_pages_go_back_to_the_system() -> None:
    """What a finished job freed stays in malloc's heap until it is handed back."""
    done = subprocess.run(
        [sys.executable, "-c", _FREED_HEAP],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    kept, after = map(int, done.stdout.split())
    assert after < kept - 150 * 1024, (kept, after)
