"""What the on-disk caches of the data stage share: names derived from content, one builder per
cache however many processes start at once, and building beside the final place, then renaming.

Every process of a distributed run (Lightning's launcher, ``torchrun``, SLURM ``srun``) calls the
same code. Whichever process first takes a cache's lock builds it; the others wait on that lock,
then find the cache built and load it. So exactly one process per cache directory builds: one
for the whole job when ``data.cache_dir`` is shared, one per node when it is node-local (the
choice Lightning's ``prepare_data_per_node`` makes by rank, made here by the file system, so no
setting can leave a node waiting for a build that never happens). The locks are POSIX locks:
the kernel releases them when their process dies, so a crashed build never blocks a later run.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from seq2seq.config import DataConfig, DataError
from seq2seq.machine.memory import hand_back_free_heap

log = logging.getLogger("seq2seq.data")

_CHUNK = 2**20
_POLL_SECONDS = 0.2


def digest(text: str) -> str:
    """16 hex characters of BLAKE2b: a cache name or fingerprint that changes whenever ``text`` does."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@contextmanager
def _writing(directory: Path) -> Iterator[None]:
    """An OSError making or writing a folder of the cache (no permission, a read-only disk, a file
    where a folder should be) is one line that names the folder and the key that moves the cache."""
    try:
        yield
    except OSError as err:
        raise DataError(
            f"cannot write the data cache at {directory}: {err.strerror or err}; "
            "set data.cache_dir to a directory you can write"
        ) from err


def file_digest(path: Path, memo: Path | None = None) -> str:
    """BLAKE2b of a file's bytes, read in 1 MiB chunks: the same corpus copied or moved elsewhere
    (node-local scratch, another user's checkout) gets the same caches.

    With ``memo``, a folder, the digest is kept there under the file's path, size, modification time
    and inode, and read back while they are unchanged: a corpus of many GB is read once, not at every
    start. Rewriting a file gives it a new modification time, or a new inode where it is replaced.
    """
    stat = path.stat()
    kept = (
        memo / digest(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}") if memo else None
    )
    if kept is not None and kept.is_file():
        return kept.read_text()
    hasher = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
    if kept is not None:
        with _writing(memo):
            memo.mkdir(parents=True, exist_ok=True)
            partial_file = kept.with_suffix(f".{os.getpid()}")
            partial_file.write_text(hasher.hexdigest())
            partial_file.replace(kept)  # atomic: a reader sees no memo or a whole one
    return hasher.hexdigest()


def build_into_place(target: Path, build: Callable[[Path], None]) -> None:
    """Run ``build(directory)`` on a temporary directory beside ``target``, then rename it to ``target``.

    A crash never leaves a half-built cache: readers see no directory or a complete one.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=_scratch_prefix(target)) as scratch:
        staging = Path(scratch) / "build"
        staging.mkdir()
        build(staging)
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():
                raise


def _scratch_prefix(target: Path) -> str:
    return f".{target.name}-"  # then tempfile's 8 random characters


def _remove_stale_scratch(target: Path) -> None:
    """Delete the scratch folders of earlier builds of ``target`` that were killed (SIGKILL, SIGTERM,
    a second Ctrl-C during the clean-up): with ``target``'s lock held, no build of it runs."""
    stale = re.compile(re.escape(_scratch_prefix(target)) + r"[a-z0-9_]{8}")
    for scratch in target.parent.iterdir():
        if stale.fullmatch(scratch.name) and scratch.is_dir():
            shutil.rmtree(scratch, ignore_errors=True)


def _take_lock(handle: object, lock_path: Path, timeout: float, what: str) -> None:
    """Block until this process holds ``lock_path``; one line says who it waits for, once."""
    deadline = time.monotonic() + timeout
    announced = False
    while True:
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as err:
            if err.errno not in (errno.EACCES, errno.EAGAIN):
                raise DataError(
                    f"cannot lock {lock_path}: {err.strerror} (the cache needs POSIX locks)"
                ) from err
        if not announced:
            log.info("waiting for %s: another process is building the %s", lock_path, what)
            announced = True
        if time.monotonic() > deadline:
            raise DataError(
                f"gave up after {timeout:.0f}s waiting for {lock_path} (another process is building the "
                f"{what}); raise data.lock_timeout_s if that build is just slow"
            )
        time.sleep(_POLL_SECONDS)


def _lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}.lock"


def held_elsewhere(target: Path) -> bool:
    """Whether another process holds ``target``'s lock now, building it: a process with other caches
    to build can build those first."""
    if not _lock_path(target).exists():
        return False
    with _lock_path(target).open("a+b") as handle:
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EACCES, errno.EAGAIN):
                return True
            raise
    return False  # closing the file released the lock


def build_once(target: Path, build: Callable[[Path], None], what: str, timeout: float) -> bool:
    """Make sure ``target`` exists, building it with ``build`` only if no other process has or is.

    Returns whether this process built it. ``what`` names the cache in the log ("tokenizer").
    """
    if target.is_dir():
        return False
    lock_path = _lock_path(target)
    with _writing(target.parent):
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = lock_path.open("a+b")
    with handle:
        _take_lock(handle, lock_path, timeout, what)
        if target.is_dir():  # built by the process this one waited for
            return False
        start = time.perf_counter()
        log.info("building the %s into %s", what, target)
        _remove_stale_scratch(target)
        build_into_place(target, build)
        hand_back_free_heap()  # a build's tables (the BPE trainer's words, a split's arrays) are done with
        log.info("built the %s in %.1fs", what, time.perf_counter() - start)
        return True


def cache_root(cfg: DataConfig) -> Path:
    """``data.cache_dir`` as an absolute path: every cache of the data stage lives under it."""
    return Path(cfg.cache_dir).expanduser().resolve()


@dataclass(frozen=True)
class Caches:
    """Where the data stage's caches live (``data.cache_dir``, absolute) and how long a process waits
    for another one building one (``data.lock_timeout_s``): all a builder needs of the config to cache."""

    root: Path
    lock_timeout_s: float

    @classmethod
    def of(cls, cfg: DataConfig) -> Caches:
        """The caches of ``cfg``."""
        return cls(cache_root(cfg), cfg.lock_timeout_s)

    def built(self, name: str, build: Callable[[Path], None], what: str) -> Path:
        """The cache ``root / name``, built by :func:`build_once` if missing."""
        target = self.root / name
        build_once(target, build, what, self.lock_timeout_s)
        return target
