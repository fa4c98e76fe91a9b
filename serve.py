"""Serve a trained checkpoint over HTTP, e.g. ``python serve.py --ckpt model.ckpt --port 8000``.

A thin wrapper: the logic lives in :mod:`seq2seq.serving.cli` (see ``--help``).
"""

import sys

import seq2seq.machine.threads  # noqa: F401  (first of ours, before torch loads: see its docstring)

# isort: split
from seq2seq.serving.cli import main

if __name__ == "__main__":
    sys.exit(main())
