"""A run directory belongs to one run: a lock held for the run's life, an earlier run's files never
written over unless this run resumes it or is told to, default names made unique, and a failed
start that removes only what it created."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import time
from pathlib import Path
from typing import BinaryIO

from seq2seq.config import ConfigError
from seq2seq.data.tokenizers.tokenizer import FILE_NAMES as TOKENIZER_FILES

LOCK_FILE = ".lock"  # held by the running run, naming it; left behind, unlocked, when it ends
STARTUP_FILES = {".hydra", "config.yaml", *TOKENIZER_FILES, LOCK_FILE}  # Hydra's and ours, before training
STARTUP_LOGS = "train*.log"  # Hydra's log: train.log, train_rank<k>.log, train_ddp_process_<k>.log
MAX_SUFFIX = 100  # runs/<time>-1 ... -99: more runs than this started in one second is a runaway script
MIN_FREE_BYTES = 200 * 2**20  # refuse to start with less free disk than a few checkpoints need


class RunDirectoryTaken(ConfigError):
    """Another run holds the directory or left its files there; nothing of it was touched."""


def not_writable(path: Path, err: OSError) -> ConfigError:
    """The one message for a run directory that cannot be created or written."""
    return ConfigError(f"output_dir {path} is not writable: {err.strerror or err}")


def earlier_run_files(path: Path) -> list[str]:
    """What in ``path`` a run writes once it trains (checkpoints, tensorboard, ...): what a new
    run must not write over. Start-up files alone mark a run that stopped before training."""
    if not path.is_dir():
        return []
    return sorted(
        entry.name
        for entry in path.iterdir()
        if entry.name not in STARTUP_FILES and not entry.match(STARTUP_LOGS)
    )


def holder(path: Path) -> str | None:
    """The process holding ``path``'s lock as it described itself, or None if none holds it."""
    try:
        file = (path / LOCK_FILE).open("rb")
    except OSError:  # no lock file, or no directory to hold one
        return None
    with file:
        try:
            fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return file.read().decode(errors="replace").strip() or "a process that is starting"
        fcntl.flock(file, fcntl.LOCK_UN)
    return None


def _in_use(path: Path, who: str) -> RunDirectoryTaken:
    return RunDirectoryTaken(
        f"{path} is in use by another run ({who}); wait for it to end or choose another directory"
    )


def check_unused(path: Path, resumes: bool, overwrite: bool) -> None:
    """Refuse ``path`` if an earlier run trained there, unless this run resumes one of its
    checkpoints or ``overwrite`` says to write over it."""
    if resumes or overwrite:
        return
    if files := earlier_run_files(path):
        shown = ", ".join(files[:4]) + (", ..." if len(files) > 4 else "")
        raise RunDirectoryTaken(
            f"{path} holds an earlier run ({shown}): resume it with "
            f"ckpt_path={path / 'checkpoints' / 'last.ckpt'}, choose another directory, "
            "or pass overwrite_output_dir=true to write over it"
        )


def resumes(ckpt_path: str | None, path: Path) -> bool:
    """Whether a run from ``ckpt_path`` continues the run in ``path``: its checkpoint lies there."""
    return ckpt_path is not None and Path(ckpt_path).resolve().is_relative_to(path.resolve())


def fresh_directory(path: Path) -> tuple[Path, set[Path]]:
    """``path``, or ``path-1``, ``path-2``, ... : the first that this call creates, and the folders
    it created (resolved). ``mkdir`` fails for all but one of the runs that ask for a name at once,
    so two runs never share one."""
    made = {parent.resolve() for parent in path.parents if not parent.exists()}
    for k in range(MAX_SUFFIX):
        candidate = path if k == 0 else path.with_name(f"{path.name}-{k}")
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError as err:
            raise not_writable(candidate, err) from err
        return candidate, {*made, candidate.resolve()}
    raise ConfigError(f"{path} and {path}-1 ... -{MAX_SUFFIX - 1} all exist: name the run with hydra.run.dir")


class RunDirectory:
    """Where a run writes, and whether this process holds it.

    :meth:`claim` takes an exclusive ``flock`` on ``<path>/.lock``, which the kernel drops when the
    process ends, even by ``kill -9``, so a crashed run never leaves its directory locked; it
    remembers what was there before, so that :meth:`discard_unstarted` removes only what the run
    added. :meth:`joined` is the same directory for another process of a launch, whose rank 0 holds it.
    """

    def __init__(self, path: Path, lock: BinaryIO | None, made: set[Path], found: set[str] | None) -> None:
        self.path = path
        self._lock = lock
        self._made = made  # the folders this run created for its directory (runs/, runs/<time>), resolved
        self._found = found  # the names the directory held before the run, if it existed

    @classmethod
    def joined(cls, path: Path) -> RunDirectory:
        """``path`` for a process that writes where its launch's rank 0 holds the lock."""
        return cls(path, None, set(), None)

    @classmethod
    def claim(cls, path: Path, resumes: bool, overwrite: bool, made: set[Path] | None = None) -> RunDirectory:
        """``path`` locked for this run, or :class:`RunDirectoryTaken` in one line. Checked before
        anything is created, and again once locked: another run may have ended in between.
        ``made``: the folders of ``path`` that this run created already (:func:`fresh_directory`)."""
        if (who := holder(path)) is not None:
            raise _in_use(path, who)
        check_unused(path, resumes, overwrite)
        key, made = path.resolve(), set(made or ())
        found = None
        if key in made or not made.isdisjoint(key.parents):  # inside a folder this run made: all ours
            made.add(key)
        elif path.is_dir():
            found = {entry.name for entry in path.iterdir()}
        else:
            made.update(folder for folder in (key, *key.parents) if not folder.exists())
        try:
            path.mkdir(parents=True, exist_ok=True)
            lock = (path / LOCK_FILE).open("a+b")
        except OSError as err:
            raise not_writable(path, err) from err
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise _in_use(path, holder(path) or "a process that is starting") from None
        directory = cls(path, lock, made, found)
        try:
            check_unused(path, resumes, overwrite)
        except RunDirectoryTaken:
            directory.release()
            raise
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        lock.truncate(0)
        lock.write(f"pid {os.getpid()} on {socket.gethostname()}, started {started}".encode())
        lock.flush()
        return directory

    @property
    def held(self) -> bool:
        """Whether this process holds the directory's lock (the launch's rank 0 does)."""
        return self._lock is not None

    def release(self) -> None:
        """Let another run have the directory; closing the lock file drops the flock."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def check_usable(self) -> None:
        """Fail before training, not at the first checkpoint, if the directory cannot be written or
        its disk is nearly full."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / f".write-test-{os.getpid()}"  # every rank of a launch probes it
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as err:
            raise not_writable(self.path, err) from err
        free = shutil.disk_usage(self.path).free
        if free < MIN_FREE_BYTES:
            raise ConfigError(
                f"output_dir {self.path} has only {free / 2**20:.0f} MiB free; need {MIN_FREE_BYTES // 2**20}"
            )

    def discard_unstarted(self) -> None:
        """Delete what a run that failed before training (a bad value, a missing corpus) created: its
        start-up files, then the directory and the folders above it if it created them and they are
        empty. What was there before the run started, or what a run that trained wrote, is kept."""
        key = self.path.resolve()
        if self.path.is_dir() and (key in self._made or self._found is not None):
            added = [entry for entry in self.path.iterdir() if entry.name not in (self._found or set())]
            if all(entry.name in STARTUP_FILES or entry.match(STARTUP_LOGS) for entry in added):
                for entry in added:
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
        for folder in (key, *key.parents):
            if folder not in self._made:
                break
            with contextlib.suppress(OSError):  # not empty: another run's directory, or what is kept
                folder.rmdir()
