"""The shell lines of a page of the docs: what the docs tests compose, parse and run."""

from __future__ import annotations

import re
from collections.abc import Iterator

SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
FENCE = re.compile(r"^```(\S*)\s*$")
INLINE = re.compile(r"`([^`]+)`")


def shell_lines(text: str) -> Iterator[tuple[int, str, bool, str]]:
    """(line number, text, fenced, paragraph) of each line of a fenced shell block, continuations
    joined, and of each inline code span elsewhere, with the paragraph it stands in."""
    lines = text.splitlines()
    fence: str | None = None
    pending, start = "", 0
    for number, line in enumerate(lines, 1):
        if match := FENCE.match(line):
            fence = match.group(1) if fence is None else None
        elif fence is None:
            paragraph = paragraph_of(lines, number - 1)
            yield from ((number, span, False, paragraph) for span in INLINE.findall(line))
        elif fence in SHELL_BLOCKS:
            pending, start = (f"{pending} {line}", start) if pending else (line, number)
            if pending.endswith("\\"):
                pending = pending[:-1]
                continue
            yield start, pending.removeprefix("$ "), True, ""
            pending = ""


def paragraph_of(lines: list[str], index: int) -> str:
    """The run of non-blank lines around ``lines[index]``."""
    first, last = index, index
    while first > 0 and lines[first - 1].strip() and not FENCE.match(lines[first - 1]):
        first -= 1
    while last + 1 < len(lines) and lines[last + 1].strip() and not FENCE.match(lines[last + 1]):
        last += 1
    return " ".join(lines[first : last + 1])
