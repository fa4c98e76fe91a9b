"""A run directory belongs to one run: a lock held for the run's life, an earlier run's files never
written over unless this run resumes it or is told to, and default names made unique."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from seq2seq.config import ConfigError
from seq2seq.data.tokenizer import FILE_NAMES as TOKENIZER_FILES

LOCK_FILE = ".lock"  # held by the running run, naming it; left behind, unlocked, when it ends
STARTUP_FILES = {".hydra", "config.yaml", *TOKENIZER_FILES, LOCK_FILE}  # Hydra's and ours, before training
STARTUP_LOGS = "train*.log"  # Hydra's log: train.log, train_rank<k>.log, train_ddp_process_<k>.log
MAX_SUFFIX = 100  # runs/<time>-1 ... -99: more runs than this started in one second is a runaway script

_claimed: dict[Path, RunLock] = {}  # the run directories this process holds, by resolved path
_made: set[Path] = set()  # the folders this process made for its run directory (runs/, runs/<time>), resolved
_found: dict[Path, set[str]] = {}  # a run directory that existed when claimed: the names it held then


class RunDirectoryTaken(ConfigError):
    """Another run holds the directory or left its files there; nothing of it was touched."""


def not_writable(path: Path, err: OSError) -> ConfigError:
    """The one message for a run directory that cannot be created or written."""
    return ConfigError(f"output_dir {path} is not writable: {err.strerror or err}")


def earlier_run_files(run_dir: Path) -> list[str]:
    """What in ``run_dir`` a run writes once it trains (checkpoints, tensorboard, ...): what a new
    run must not write over. Start-up files alone mark a run that stopped before training."""
    if not run_dir.is_dir():
        return []
    return sorted(
        path.name
        for path in run_dir.iterdir()
        if path.name not in STARTUP_FILES and not path.match(STARTUP_LOGS)
    )


def holder(run_dir: Path) -> str | None:
    """The process holding ``run_dir``'s lock as it described itself, or None if none holds it."""
    try:
        file = (run_dir / LOCK_FILE).open("rb")
    except OSError:  # no lock file, or no directory to hold one
        return None
    with file:
        try:
            fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return file.read().decode(errors="replace").strip() or "a process that is starting"
        fcntl.flock(file, fcntl.LOCK_UN)
    return None


class RunLock:
    """An exclusive ``flock`` on ``<run_dir>/.lock``: the kernel drops it when the process ends,
    even by ``kill -9``, so a crashed run never leaves its directory locked."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            self._file: BinaryIO = (run_dir / LOCK_FILE).open("a+b")
        except OSError as err:
            raise not_writable(run_dir, err) from err
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            raise _in_use(run_dir, holder(run_dir) or "a process that is starting") from None
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        self._file.truncate(0)
        self._file.write(f"pid {os.getpid()} on {socket.gethostname()}, started {started}".encode())
        self._file.flush()

    def release(self) -> None:
        _claimed.pop(self.run_dir.resolve(), None)
        self._file.close()  # closing drops the flock


def _note_what_exists(run_dir: Path) -> None:
    """Remember what of ``run_dir`` is there before this run writes, so that a failed start removes
    only what it added: a directory the user made, and their files in it, stay."""
    key = run_dir.resolve()
    if key in _made or not _made.isdisjoint(key.parents):  # inside a folder this process made: all ours
        _made.add(key)
    elif run_dir.is_dir():
        _found[key] = {path.name for path in run_dir.iterdir()}
    else:
        _made.update(folder for folder in (key, *key.parents) if not folder.exists())


def _in_use(run_dir: Path, who: str) -> RunDirectoryTaken:
    return RunDirectoryTaken(
        f"{run_dir} is in use by another run ({who}); wait for it to end or choose another directory"
    )


def check_unused(run_dir: Path, resumes: bool, overwrite: bool) -> None:
    """Refuse ``run_dir`` if an earlier run trained there, unless this run resumes one of its
    checkpoints or ``overwrite`` says to write over it."""
    if resumes or overwrite:
        return
    if files := earlier_run_files(run_dir):
        shown = ", ".join(files[:4]) + (", ..." if len(files) > 4 else "")
        raise RunDirectoryTaken(
            f"{run_dir} holds an earlier run ({shown}): resume it with "
            f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}, choose another directory, "
            "or pass overwrite_output_dir=true to write over it"
        )


def claim(run_dir: Path, resumes: bool, overwrite: bool) -> RunLock:
    """Lock ``run_dir`` for this run, or raise :class:`RunDirectoryTaken` in one line. Checked
    before anything is created, and again once locked: another run may have ended in between."""
    if (lock := _claimed.get(run_dir.resolve())) is not None:
        return lock
    if (who := holder(run_dir)) is not None:
        raise _in_use(run_dir, who)
    check_unused(run_dir, resumes, overwrite)
    _note_what_exists(run_dir)
    lock = RunLock(run_dir)
    try:
        check_unused(run_dir, resumes, overwrite)
    except RunDirectoryTaken:
        lock.release()
        raise
    _claimed[run_dir.resolve()] = lock
    return lock


@contextmanager
def owned(run_dir: Path, resumes: bool, overwrite: bool) -> Iterator[None]:
    """``run_dir`` claimed for the ``with`` block; a claim this process already holds (``train.py``
    takes one before Hydra writes there) stands, and outlives the block."""
    if run_dir.resolve() in _claimed:
        yield
        return
    lock = claim(run_dir, resumes, overwrite)
    try:
        yield
    finally:
        lock.release()


def fresh_directory(path: Path) -> Path:
    """``path``, or ``path-1``, ``path-2``, ... : the first that this call creates. ``mkdir`` fails
    for all but one of the runs that ask for a name at once, so two runs never share one."""
    _made.update(parent.resolve() for parent in path.parents if not parent.exists())
    for k in range(MAX_SUFFIX):
        candidate = path if k == 0 else path.with_name(f"{path.name}-{k}")
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError as err:
            raise not_writable(candidate, err) from err
        _made.add(candidate.resolve())
        return candidate
    raise ConfigError(f"{path} and {path}-1 ... -{MAX_SUFFIX - 1} all exist: name the run with hydra.run.dir")


def resumes(ckpt_path: str | None, run_dir: Path) -> bool:
    """Whether a run from ``ckpt_path`` continues the run in ``run_dir``: its checkpoint lies there."""
    return ckpt_path is not None and Path(ckpt_path).resolve().is_relative_to(run_dir.resolve())


def discard_unstarted_run(run_dir: Path) -> None:
    """Delete what a run that failed before training (a bad value, a missing corpus) created: its
    start-up files, then the run directory and the folders above it if it created them and they
    are empty. What was there before the run started, or what a run that trained wrote, is kept."""
    key = run_dir.resolve()
    if run_dir.is_dir() and (key in _made or key in _found):
        added = [path for path in run_dir.iterdir() if path.name not in _found.get(key, set())]
        if all(path.name in STARTUP_FILES or path.match(STARTUP_LOGS) for path in added):
            for path in added:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
    for folder in (key, *key.parents):
        if folder not in _made:
            break
        with contextlib.suppress(OSError):  # not empty: another run's directory, or what is kept
            folder.rmdir()
