"""What the command lines (``translate.py``, ``serve.py``, ``python -m seq2seq.export``) share:
bad arguments become one ``UsageError`` line instead of argparse's usage block and exit."""

from __future__ import annotations

import argparse


class UsageError(Exception):
    """Bad command-line arguments."""


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises :class:`UsageError` where argparse would print usage and exit."""

    def error(self, message: str) -> None:
        raise UsageError(message)
