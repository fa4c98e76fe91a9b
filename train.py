"""Train a translation model: ``python train.py [hydra overrides]`` (``--help`` lists them)."""

from pathlib import Path

import seq2seq.machine.onednn_cache  # first of ours, and nothing above loads torch: see their docstrings
import seq2seq.machine.threads
import seq2seq.machine.use_allocator  # noqa: F401  (restarts under jemalloc or mimalloc, before torch loads)

# isort: split
from seq2seq.launch.start import main

if __name__ == "__main__":
    main(Path(__file__).resolve().parent / "configs")
