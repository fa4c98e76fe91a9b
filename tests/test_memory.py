"""Training's allocator: jemalloc preloaded on a CPU with native bf16 where installed, malloc
elsewhere, either on request; evaluation loads without a worker process; freed heap handed back."""

import ctypes
import subprocess
import sys
from dataclasses import replace

import pytest

from seq2seq.config import DataConfig
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.machine.cpu_flags import has_native_bf16
from seq2seq.machine.memory import CHOICE, allocator, jemalloc_library, preloaded_environment

LIBRARY = "libjemalloc.so.2"


def test_jemalloc_goes_first_in_ld_preload_on_a_cpu_with_native_bf16() -> None:
    assert preloaded_environment({"HOME": "/h"}, LIBRARY, True) == {"HOME": "/h", "LD_PRELOAD": LIBRARY}
    assert (
        preloaded_environment({"LD_PRELOAD": "libx.so"}, LIBRARY, True)["LD_PRELOAD"] == f"{LIBRARY}:libx.so"
    )
    assert preloaded_environment({CHOICE: "system"}, LIBRARY, True) is None


def test_a_cpu_without_native_bf16_keeps_malloc_unless_jemalloc_is_chosen() -> None:
    """There training runs in float32, where jemalloc's handing back of pages cost steps."""
    assert preloaded_environment({}, LIBRARY, False) is None
    assert preloaded_environment({CHOICE: "auto"}, LIBRARY, False) is None
    assert preloaded_environment({CHOICE: "jemalloc"}, LIBRARY, False) == {
        CHOICE: "jemalloc",
        "LD_PRELOAD": LIBRARY,
    }


def test_nothing_to_do_without_jemalloc_or_once_it_is_preloaded() -> None:
    assert preloaded_environment({}, None, True) is None
    assert (
        preloaded_environment({"LD_PRELOAD": f"/usr/lib/{LIBRARY}"}, LIBRARY, True) is None
    )  # no second restart


def test_an_unknown_choice_is_a_one_line_error() -> None:
    expected = f"error: {CHOICE}='tcmalloc': expected one of auto, jemalloc, system"
    with pytest.raises(SystemExit, match=expected):
        preloaded_environment({CHOICE: "tcmalloc"}, LIBRARY, True)


def _mapped_libraries(choice: str) -> str:
    """The memory map of a process that imports ``seq2seq.machine.use_jemalloc`` first, as train.py does."""
    code = "import seq2seq.machine.use_jemalloc; print(open('/proc/self/maps').read())"
    env = {"PATH": "/usr/bin:/bin", CHOICE: choice}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout


@pytest.mark.skipif(jemalloc_library() is None, reason="jemalloc is not installed")
def test_the_launch_restarts_under_jemalloc_and_the_system_choice_keeps_malloc() -> None:
    assert "libjemalloc" in _mapped_libraries("jemalloc")
    assert "libjemalloc" not in _mapped_libraries("system")
    assert ("libjemalloc" in _mapped_libraries("auto")) == has_native_bf16()


def test_evaluation_loads_in_process_whatever_the_training_workers(tiny_data_cfg: DataConfig) -> None:
    """A validation worker would be a fork of the training process, grown by then to its largest."""
    datamodule = TranslationDataModule(replace(tiny_data_cfg, num_workers=1))
    datamodule.setup("fit")
    assert datamodule.train_dataloader().num_workers == 1
    assert datamodule.val_dataloader().num_workers == 0
    assert datamodule.test_dataloader().num_workers == 0


def test_the_run_log_says_which_allocator_runs_and_why() -> None:
    maps = f"7f00-7f01 r-xp 0 0:0 0 /usr/lib/x86_64-linux-gnu/{LIBRARY}\n"
    assert allocator({}, maps, LIBRARY, True) == "jemalloc (preloaded)"
    assert allocator({CHOICE: "system"}, "", LIBRARY, True).endswith(f"({CHOICE}=system)")
    assert "no native bf16" in allocator({}, "", LIBRARY, False)
    assert "no jemalloc installed" in allocator({}, "", None, True)


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
