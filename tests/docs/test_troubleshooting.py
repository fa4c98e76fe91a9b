"""docs/troubleshooting.md has a row for every one-line error the code can print.

The one-line errors are the messages ``seq2seq/`` raises with the exceptions the entry points turn
into ``error: ...`` lines (:data:`ONE_LINE`). Each message has a key: the first config key or
command-line flag it names (``data.path``, ``--top-p``), or, naming none, its first fixed phrase
(``is not a seq2seq checkpoint``; ``must be >= 0`` for the range checks that name their key at
run time), so one row may answer several messages. A message whose key no row's message column
holds fails the test: a new ``error:`` line needs its row. A message that is only another error's
text (``f"{err}"``) has no key of its own.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers.compose import ROOT

ONE_LINE = {
    "ConfigError", "DataError", "DeviceError", "CheckpointError", "ShortlistError", "ExportError",
    "UsageError", "AlignmentError", "OutputError", "RunDirectoryTaken", "NonFiniteLossError", "SystemExit",
}  # fmt: skip
NAMED = re.compile(
    r"(?<![\w.{-])(?:(?:model|data|optim|decode|trainer|callbacks|logger)\.\w+|--[a-z][\w-]*"
    r"|init_from|ckpt_path|output_dir)\b"
)
PAGE = ROOT / "docs" / "troubleshooting.md"


def template(node: ast.expr) -> str:
    """A message's fixed text, ``{}`` where a value goes and ``{?}`` for text not known here."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return template(node.left) + template(node.right)
    return "{?}"


def messages(root: Path = ROOT / "seq2seq") -> list[tuple[str, str]]:
    """(file:line, template) of every one-line error raised under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            if getattr(node.exc.func, "id", None) in ONE_LINE and node.exc.args:
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                found.append((where, template(node.exc.args[0]).removeprefix("error: ")))
    return found


def key(message: str) -> str | None:
    """The config key or flag ``message`` names first, else its first fixed phrase (cut at a value,
    a bracket, a colon or a semicolon; no trailing ``, got``) of three words or more, two of them
    of letters; None for a message that is another error's text."""
    if named := NAMED.search(message):
        return named.group(0)
    for part in re.split(r"\{\??\}|[():;]", message):
        phrase = re.sub(r",?\s*got$", "", part.strip(" ,"))
        words = phrase.split()
        if len(words) >= 3 and sum(bool(re.search(r"[a-zA-Z]", word)) for word in words) >= 2:
            return phrase
    return None


def message_column() -> str:
    """The first column of every row of the page's tables: the messages it explains."""
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith("| ")]
    return "\n".join(row[2:].split(" | ", 1)[0] for row in rows)


MESSAGES = messages()


def test_the_code_raises_one_line_errors_this_test_finds() -> None:
    keys = {key(message) for _, message in MESSAGES}
    assert len(MESSAGES) > 100 and {"data.path", "--top-p", "must be >= 0"} <= keys


@pytest.mark.parametrize(("where", "message"), MESSAGES, ids=[where for where, _ in MESSAGES])
def test_every_one_line_error_has_a_row(where: str, message: str) -> None:
    if (wanted := key(message)) is not None:
        assert wanted in message_column(), f"{where}: no row of troubleshooting.md for {message!r}"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("data.path {} matches no file (looked in {})", "data.path"),
        ("--{} must be positive, got {}", "must be positive"),
        ("{}: its token ids are not 0..{}, one token each", "its token ids are not 0.."),
        ("{} is not a seq2seq checkpoint (no model config/tokenizer inside)", "is not a seq2seq checkpoint"),
        ("{}: {}", None),
        ("{?}", None),
    ],
)
def test_a_message_key_is_its_key_or_its_first_phrase(message: str, expected: str | None) -> None:
    assert key(message) == expected
