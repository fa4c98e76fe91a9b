"""What the on-disk caches of the data stage share: short digests for their names, and building
a cache beside its final place, then renaming it there whole."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path


def digest(text: str) -> str:
    """16 hex characters of BLAKE2b: a cache name or fingerprint that changes whenever ``text`` does."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def build_into_place(target: Path, build: Callable[[Path], None]) -> None:
    """Run ``build(directory)`` on a temporary directory beside ``target``, then rename it to ``target``.

    A crash never leaves a half-built cache. When another process renamed the same build into
    place first, its copy is kept.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as scratch:
        staging = Path(scratch) / "build"
        staging.mkdir()
        build(staging)
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():
                raise
