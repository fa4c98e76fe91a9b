"""``python ARGV`` run in the test's own process, for tests of what a command prints and its exit
status: a process of its own spends seconds importing torch, Lightning and Hydra. Tests of what
only a process shows (signals, a lock another process holds, import-time effects, the allocator's
restart, DDP) start one."""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import runpy
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from seq2seq.machine.memory import CHOICE
from tests.helpers.compose import ROOT

# A fresh interpreter's warning filters, where pytest's show more (every DeprecationWarning)
PYTHON_WARNING_FILTERS = (
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
)


def python(*argv: str, cwd: Path = ROOT, stderr_to_stdout: bool = False) -> subprocess.CompletedProcess:
    """``python ARGV`` (a script and its arguments, or ``-m MODULE ...``) run here as ``__main__``
    in ``cwd``, its output captured (``stderr_to_stdout``: both in ``stdout``, in the order
    written); the exit status as Python sets it (an uncaught exception: 1, its traceback on
    stderr). What the command changes of the process (environment, cwd, argv, logging, threads) is
    put back after."""
    out = io.StringIO()
    err = out if stderr_to_stdout else io.StringIO()
    with _process_state(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _run_as_main(list(argv))
    stderr = None if stderr_to_stdout else err.getvalue()
    return subprocess.CompletedProcess([sys.executable, *argv], code, out.getvalue(), stderr)


def _run_as_main(argv: list[str]) -> int:
    module = argv[1] if argv[0] == "-m" else None
    sys.argv = argv[1:] if module else argv  # python -m: sys.argv[0] becomes the module's file
    try:
        if module:
            with _out_of_sys_modules(module):
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:
        return _exit_status(done.code)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("error: ...") prints its message and exits 1
    return 1


@contextlib.contextmanager
def _out_of_sys_modules(module: str) -> Iterator[None]:
    """A module that a test imported runs as ``__main__`` as in a process of its own, without
    runpy's warning that it is imported already. A package stays: its ``__main__`` runs, and a
    package imported anew would not hold the submodules the run imports for the tests after it."""
    imported = sys.modules.get(module)
    if imported is not None and hasattr(imported, "__path__"):
        module = f"{module}.__main__"
    imported = sys.modules.pop(module, None)
    try:
        yield
    finally:
        if imported is not None:
            sys.modules[module] = imported


@contextlib.contextmanager
def _process_state(cwd: Path) -> Iterator[None]:
    environ, argv, directory, threads = dict(os.environ), sys.argv, os.getcwd(), torch.get_num_threads()
    loggers = _logging_state()
    try:
        os.chdir(cwd)
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category, module in PYTHON_WARNING_FILTERS:
                warnings.filterwarnings(action, category=category, module=module, append=True)
            warnings.showwarning = _print_warning
            yield
    finally:
        os.chdir(directory)
        _set_environment(environ)
        sys.argv = argv
        torch.set_num_threads(threads)
        _restore_logging(loggers)


def _set_environment(env: Mapping[str, str]) -> None:
    os.environ.clear()
    os.environ.update(env)


def _print_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file=None, line=None
) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


LoggerState = tuple[logging.Logger, int, list[logging.Handler], bool, bool]


def _logging_state() -> tuple[int, list[LoggerState]]:
    loggers = [logging.root, *logging.Logger.manager.loggerDict.values()]
    return logging.root.manager.disable, [
        (logger, logger.level, logger.handlers[:], logger.propagate, logger.disabled)
        for logger in loggers
        if isinstance(logger, logging.Logger)
    ]


def _restore_logging(state: tuple[int, list[LoggerState]]) -> None:
    """Logging as it was: Hydra configures it for the run (a file handler on its log among others)."""
    disable, saved = state
    logging.disable(disable)
    kept = {id(logger) for logger, *_ in saved}
    for logger in (logging.root, *logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and id(logger) not in kept:  # made by the command
            saved.append((logger, logging.NOTSET, [], True, False))
    for logger, level, handlers, propagate, disabled in saved:
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.propagate, logger.disabled = propagate, disabled


def _import_without_restart(module: str) -> None:
    environ = dict(os.environ)
    os.environ[CHOICE] = "system"
    try:
        importlib.import_module(module)
    finally:
        _set_environment(environ)


# train.py's first import restarts the process under jemalloc or mimalloc on a CPU with native bf16:
# that would replace this test process, so it is imported here once, with the restart off.
_import_without_restart("seq2seq.machine.use_allocator")
