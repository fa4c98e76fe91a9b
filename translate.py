"""Translate with a trained checkpoint, e.g. ``python translate.py --ckpt model.ckpt "How are you?"``.

A thin wrapper: the logic lives in :mod:`seq2seq.inference.cli` (see ``--help``).
"""

import sys

import seq2seq.machine.threads  # noqa: F401  (first of ours, before torch loads: see its docstring)

# isort: split
from seq2seq.inference.cli import main

if __name__ == "__main__":
    sys.exit(main())
