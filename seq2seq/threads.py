"""OpenMP's wait policy for training and decoding; import this before torch loads OpenMP.

PyTorch's CPU kernels run on OpenMP threads. By default (GNU libgomp) a thread that has done its
share of a parallel region spins 300,000 times before it sleeps. On an idle machine that saves a
wake-up; when another process wants the same cores, the spinning threads take CPU time from the
thread that is still working, and every region waits for the slowest one. Training sleeps at once
(``OMP_WAIT_POLICY=PASSIVE``). Decoding runs hundreds of short regions per step, where sleeping
at once costs a wake-up each time, so ``translate.py`` and ``serve.py`` spin briefly
(``GOMP_SPINCOUNT=2000``): near spinning's speed on a quiet machine and near passive's beside a
busy process (measured in docs/performance.md, Decoding). libgomp reads these variables once, when
torch's library loads, hence the import order; either one already in the environment wins, so
``OMP_WAIT_POLICY=ACTIVE python translate.py`` spins as long as libgomp's default.
"""

import os
import sys
from pathlib import Path

DECODERS = ("translate.py", "serve.py")  # entry points that decode
USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # what a user may have chosen instead


def wait_policy(program: str) -> dict[str, str]:
    """The OpenMP variables for ``program`` (a path to an entry point): brief spinning to decode,
    none to train."""
    if Path(program).name in DECODERS:
        return {"GOMP_SPINCOUNT": "2000"}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


if not any(name in os.environ for name in USER_SETTINGS):
    os.environ.update(wait_policy(sys.argv[0]))
