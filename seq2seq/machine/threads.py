"""OpenMP's wait policy; import this before torch, since libgomp reads it once, when it loads.

Training's waiting threads sleep at once, so that none takes the cores from a busy neighbour; the
decoders' spin briefly, as they run many short parallel regions. A value already set wins.
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
