"""What ``data.path`` points at: the format of the corpus and its files, and their content digest;
and how its records are read (:class:`Reading`).

``data.path`` is one of
- a file, its format named by its suffix (:data:`SUFFIXES`, ``.gz`` allowed);
- a folder written by ``datasets``' ``save_to_disk``;
- aligned plain-text files, line N of each the translation of line N of the others: a list
  (``[train.en,train.es]``, in the order of ``data.columns``) or a glob (``train.*``) whose
  matches end in the languages of ``data.columns``.
A relative path is looked up in the working directory, then in the checkout (Hydra may chdir).
"""

from __future__ import annotations

import glob
import hashlib
from dataclasses import dataclass
from pathlib import Path

from seq2seq.config import DataConfig, DataError
from seq2seq.data.cache import file_digest

_REPO_ROOT = Path(__file__).resolve().parents[3]  # seq2seq/data/readers/sources.py -> the checkout
SUFFIXES = {".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}
DATASETS = "datasets"  # a save_to_disk folder
ALIGNED = "aligned"  # one plain-text file per language
_SAVED_MARKERS = ("dataset_info.json", "dataset_dict.json")  # what save_to_disk writes into its folder
_GLOB_CHARS = "*?["


@dataclass(frozen=True)
class Reading:
    """How a corpus's records become pairs, whatever files hold them: the ``data.*`` keys that the
    readers and the corpus cache's name read, under their names there, taken once from the config."""

    columns: tuple[str, ...]  # the language of each column or aligned file
    direction: str  # "<src>-<tgt>"
    source_lang: str
    target_lang: str
    encoding: str
    header: bool | None
    hub_translation_field: str | None
    hub_split: str

    @classmethod
    def of(cls, cfg: DataConfig) -> Reading:
        """The reading options of ``cfg``."""
        return cls(
            tuple(cfg.columns), cfg.direction, cfg.source_lang, cfg.target_lang, cfg.encoding,
            cfg.header, cfg.hub_translation_field, cfg.hub_split,
        )  # fmt: skip


@dataclass(frozen=True)
class Source:
    """A located corpus: its format and files (aligned text: one per ``data.columns`` entry, in order)."""

    format: str
    files: tuple[Path, ...]

    def file_of(self, column: int) -> Path:
        """The file that holds ``data.columns[column]``."""
        return self.files[column] if self.format == ALIGNED else self.files[0]

    def digests(self, memo: Path | None = None) -> list[str]:
        """The bytes of each file, in order (a folder: of every file in it, with its name there), so
        a corpus copied or renamed keeps its caches; ``memo`` as :func:`file_digest`'s."""
        return [
            _folder_digest(path, memo) if path.is_dir() else file_digest(path, memo) for path in self.files
        ]


def _folder_digest(folder: Path, memo: Path | None) -> str:
    hasher = hashlib.blake2b(digest_size=16)
    for member in sorted(p for p in folder.rglob("*") if p.is_file()):
        hasher.update(f"{member.relative_to(folder)}={file_digest(member, memo)};".encode())
    return hasher.hexdigest()


def resolve_path(path: str) -> Path:
    """Find ``path`` (a file or folder) in the working directory, then in the checkout."""
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        if candidate.exists():
            return candidate
        raise DataError(f"corpus file not found: {candidate}")
    for base in (Path.cwd(), _REPO_ROOT):
        if (base / candidate).exists():
            return (base / candidate).resolve()
    raise DataError(f"corpus file not found: {path} (looked in {Path.cwd()} and {_REPO_ROOT})")


def _expand(pattern: str) -> list[Path]:
    pattern = str(Path(pattern).expanduser())
    bases = [Path()] if Path(pattern).is_absolute() else [Path.cwd(), _REPO_ROOT]
    for base in bases:
        matches = sorted(glob.glob(str(base / pattern)))
        if matches:
            return [Path(match).resolve() for match in matches]
    raise DataError(f"data.path {pattern!r} matches no file (looked in {', '.join(map(str, bases))})")


def _language_of(path: Path) -> str:
    """The language a file's last suffix names (``train.en.gz`` -> ``en``)."""
    return Path(path.name.removesuffix(".gz")).suffix.removeprefix(".")


def _aligned(paths: list[Path], columns: list[str], listed: bool) -> Source:
    """Aligned files ordered like ``data.columns``: a list by position, a glob by suffix; a file
    whose suffix names another language of ``data.columns`` than its position is an error."""
    if len(paths) != len(columns):
        raise DataError(
            f"data.path gives {len(paths)} files ({', '.join(p.name for p in paths)}); aligned text "
            f"needs one per language of data.columns {columns}"
        )
    if not listed:
        by_language = {_language_of(path): path for path in paths}
        if sorted(by_language) != sorted(columns):
            raise DataError(
                f"data.path matches {', '.join(p.name for p in paths)}: to tell their languages apart, "
                f"their names must end in those of data.columns {columns} (train.en), or list them in order"
            )
        paths = [by_language[language] for language in columns]
    for path, language in zip(paths, columns, strict=True):
        if _language_of(path) in columns and _language_of(path) != language:
            raise DataError(
                f"data.path lists {path.name} where data.columns {columns} has {language}: "
                f"list the files in the order of data.columns"
            )
    return Source(ALIGNED, tuple(paths))


def _single(path: Path) -> Source:
    if path.is_dir():
        if not any((path / marker).is_file() for marker in _SAVED_MARKERS):
            raise DataError(f"{path} is a folder but not one written by datasets' save_to_disk")
        return Source(DATASETS, (path,))
    suffix = Path(path.name.removesuffix(".gz")).suffix
    if suffix not in SUFFIXES:
        allowed = ", ".join(SUFFIXES)
        raise DataError(
            f"unsupported corpus format: {path.name} (use {allowed}, optionally .gz, a save_to_disk "
            f"folder, or aligned text files: data.path=[train.en,train.es])"
        )
    return Source(SUFFIXES[suffix], (path,))


def locate(path: str | list[str], columns: tuple[str, ...]) -> Source:
    """The :class:`Source` that ``path`` (``data.path``, or a given set's) names; ``columns`` are
    ``data.columns``, which order aligned files."""
    listed = isinstance(path, list | tuple)
    if listed:
        paths = [resolve_path(p) for p in path]
    elif any(char in path for char in _GLOB_CHARS):
        paths = _expand(path)
    else:
        paths = [resolve_path(path)]
    return _single(paths[0]) if len(paths) == 1 else _aligned(paths, list(columns), listed)
