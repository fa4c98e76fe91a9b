"""What the bad-input tests share: a command run as a user runs it, its one line of stderr, and
checkpoints gone wrong in the ways users meet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.compose import ROOT


def run_as_user(*argv: str, **options) -> subprocess.CompletedProcess:
    """``python ARGV`` in the repository, as a user runs it."""
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120, **options
    )


def one_line(stderr: str) -> str:
    """The single line a bad input may print; any other count fails the test, showing all of it."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def bad_checkpoint(kind: str, checkpoint: Path, directory: Path) -> tuple[Path, str]:
    """A checkpoint gone wrong and the reason its error gives."""
    path = directory / f"{kind}.ckpt"
    if kind == "empty":
        path.write_bytes(b"")
        return path, "the file is empty (0 bytes)"
    if kind == "truncated":  # a copy cut short
        path.write_bytes(checkpoint.read_bytes()[:100_000])
        return path, "the file is truncated (100,000 bytes, its zip archive has no end)"
    if kind == "short":  # torch's own error is an OSError, EINVAL
        path.write_bytes(checkpoint.read_bytes()[:5_000])
        return path, "the file is truncated (5,000 bytes, its zip archive has no end)"
    path.write_text("step,loss\n1,7.5\n", encoding="utf-8")  # a text file renamed .ckpt
    return path, "it holds text, not a PyTorch checkpoint"


KINDS = ("empty", "truncated", "short", "text")
