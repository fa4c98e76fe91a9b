"""How every command line (``translate.py``, ``serve.py``, ``python -m seq2seq.export``) ends: bad
arguments become one ``UsageError`` line instead of argparse's usage block, and :func:`run_command`
turns what went wrong into an exit code and at most one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable

from seq2seq.machine.hardware import AUTO, INFERENCE_DTYPES

USAGE = 2  # exit code of bad arguments
FAILED = 1  # of an expected failure (and of a reader that left)
INTERRUPTED = 130  # of Ctrl-C: 128 + SIGINT, as a shell reports it
TERMINATED = 143  # of SIGTERM: 128 + SIGTERM


class UsageError(Exception):
    """Bad command-line arguments."""


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises :class:`UsageError` where argparse would print usage and exit."""

    def error(self, message: str) -> None:
        raise UsageError(message)


def help_asked(argv: list[str], doc: str) -> bool:
    """Whether ``argv`` asks for ``-h``/``--help``, printing ``doc`` if so: for the commands whose
    arguments are Hydra overrides, where Hydra would reject ``--help`` as a malformed override."""
    if not {"-h", "--help"} & set(argv):
        return False
    print(doc.strip())
    return True


def add_model_arguments(parser: argparse.ArgumentParser, model_help: str, ensemble: bool = False) -> None:
    """``--ckpt PATH`` or ``--model DIR``, one of them required: what
    :func:`seq2seq.inference.backends.open_model` opens. With ``ensemble``, ``--ckpt`` may be given
    several times and ``args.ckpt`` is a list of paths."""
    model = parser.add_mutually_exclusive_group(required=True)
    if ensemble:
        model.add_argument(
            "--ckpt",
            metavar="PATH",
            action="append",
            help="checkpoint written by train.py; several: an ensemble (they must share a tokenizer)",
        )
    else:
        model.add_argument("--ckpt", metavar="PATH", help="checkpoint written by train.py")
    model.add_argument("--model", metavar="DIR", help=model_help)


def add_compute_arguments(parser: argparse.ArgumentParser, dtype_help: str) -> None:
    """``--device`` and ``--dtype``: where and in which number type :func:`open_model` runs the model."""
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default="auto", help="default: auto")
    parser.add_argument("--dtype", choices=[AUTO, *INFERENCE_DTYPES], default=AUTO, help=dtype_help)


def run_command(prog: str, command: Callable[[], int], expected: tuple[type[Exception], ...]) -> int:
    """``command()``'s exit code, or the code of how it failed; nothing is raised but a bug.

    A :class:`UsageError` prints ``PROG: error: MSG (see --help)`` and gives 2; an ``expected``
    error prints the first line of its message and gives 1; a closed stdout (``| head``) stops
    quietly with 1; Ctrl-C gives 130. Anything else is a bug and keeps its traceback.
    """
    try:
        return command()
    except BrokenPipeError:  # the reader left; stop quietly
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return FAILED
    except UsageError as err:
        print(f"{prog}: error: {err} (see --help)", file=sys.stderr)
        return USAGE
    except expected as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"{prog}: error: {message}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        return INTERRUPTED


def moved(old: str, new: str) -> None:
    """The notice a command's old module name prints before it runs as ``new``: scripts keep
    working for a release while they are changed."""
    print(
        f"warning: python -m {old} has moved to python -m {new}; the old name goes in a later release",
        file=sys.stderr,
    )
