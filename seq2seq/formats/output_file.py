"""Files written whole: a new file beside the one a path names, flushed to disk and renamed onto it
only once it is complete, so a kill, a full disk or an error midway leaves the old file as it was
and no partial file behind. Checkpoints (:func:`seq2seq.formats.checkpoint.save_atomically`) and
translate.py's outputs are written so.

A command's output (:func:`output`) is stdout, or a path: a FIFO or a device (``/dev/stdout``) is
written into, a regular file replaced whole, through any symlink, keeping its mode; a file without
a write bit is refused (:func:`check_writable`) before any work.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TextIO


class OutputError(Exception):
    """An output cannot be written; one line for the user."""


@contextlib.contextmanager
def written_whole(path: str | Path, binary: bool = False, one_partial: bool = False) -> Iterator[IO]:
    """A file open for writing that takes ``path``'s place when the block ends without an error.

    The file replaced is the one ``path`` names through any symlink, and keeps its mode; a new one
    gets the umask's. It is first written beside it under a new name, or, ``one_partial``, under
    ``.NAME.partial`` each time (a writer alone on its file: a killed write's leftover is reused, not
    kept). An OSError (creating, writing, flushing or renaming) propagates, the partial file removed.
    """
    target = Path(path).resolve()  # a symlink stays, and the file it points at is replaced
    if one_partial:
        temp, flags = target.with_name(f".{target.name}.partial"), os.O_TRUNC
    else:
        temp, flags = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial"), os.O_EXCL
    mode = existing_mode(target)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | flags, 0o666)  # 0o666 less the umask
        if mode is not None and stat.S_ISREG(os.fstat(fd).st_mode):
            os.fchmod(fd, stat.S_IMODE(mode))
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)


def existing_mode(path: str | Path) -> int | None:
    """The mode of the file ``path`` names, through any symlink (``/dev/stdout`` names a pipe), or
    None if there is none yet."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None


def check_writable(option: str, path: str | None) -> None:
    """Refuse an output that cannot be written before the work, not after minutes of it. A file
    without any write bit is refused even where root could replace it: someone made it read-only."""
    if path is None:
        return
    try:
        mode = existing_mode(path)
    except OSError as err:
        raise OutputError(f"cannot write {option} {path}: {err.strerror}") from err
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"cannot write {option} {path}: it is a directory")
    if mode is not None and not stat.S_ISREG(mode):  # a FIFO, a device, /dev/stdout: written into
        return
    if mode is not None and not (mode & 0o222 and os.access(path, os.W_OK)):
        raise OutputError(
            f"cannot write {option} {path}: the file is read-only (mode {stat.S_IMODE(mode):o})"
        )
    target = Path(path).resolve()
    if not target.parent.is_dir():
        raise OutputError(f"cannot write {option} {path}: its directory {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK):
        raise OutputError(f"cannot write {option} {path}: no permission to create files in {target.parent}")


@contextlib.contextmanager
def output(path: str | None, option: str = "--output") -> Iterator[TextIO]:
    """stdout; ``path`` itself when it names a FIFO or a device (``/dev/stdout``, ``/dev/null``),
    streams to write into, not files to replace; else :func:`written_whole`. An OSError while the
    output is open is an :class:`OutputError` that names ``path`` as the user gave it."""
    try:
        if path is None:
            yield sys.stdout
            return
        mode = existing_mode(path)
        if mode is not None and not stat.S_ISREG(mode):
            with open(path, "w", encoding="utf-8") as stream:
                yield stream
            return
        with written_whole(path) as handle:
            yield handle
    except BrokenPipeError:  # the reader left; the command stops quietly
        raise
    except OSError as err:  # named as the user gave it: the temporary file is ours
        raise OutputError(f"cannot write {option} {path or 'stdout'}: {err.strerror or err}") from err
