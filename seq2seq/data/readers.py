"""One reader per corpus format, in a registry keyed by format: each turns a located corpus into
numbered (source, target) values and tallies the records it cannot read; :func:`read_pairs`
then keeps the pairs with text on both sides.

Which field holds which language: TSV, CSV and aligned text by position (``data.columns`` names
the language of each column or file, and a column that is not a language gets any other name);
JSONL, parquet and ``save_to_disk`` folders by name, a key or column per language of
``data.direction``, or those keys nested under ``data.hub_translation_field`` as ``datasets``
writes translation data (``{"translation": {"en": ..., "es": ...}}``).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any, TextIO

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from seq2seq.config import DataConfig, DataError
from seq2seq.data.malformed import Tally
from seq2seq.data.sources import ALIGNED, DATASETS, Source

log = logging.getLogger("seq2seq.data")

Record = tuple[int, Any, Any]  # (line or row number from 1, source value, target value)
_BATCH = 10_000  # rows per Arrow batch read from parquet or a save_to_disk folder
csv.field_size_limit(sys.maxsize)  # a long sentence is not an error; an unclosed quote is caught below


@contextmanager
def _text(path: Path, encoding: str, newline: str) -> Iterator[TextIO]:
    """``path`` (``.gz`` or not) decoded; undecodable bytes become lone surrogates, not errors."""
    opener = gzip.open if path.suffix == ".gz" else open
    with (
        opener(path, "rb") as raw,
        io.TextIOWrapper(raw, encoding=encoding, errors="surrogateescape", newline=newline) as handle,
    ):
        yield handle


def _lines(path: Path, encoding: str) -> Iterator[str]:
    """Lines without their ending (CRLF included) or a leading BOM; only ``\\n`` ends a line."""
    with _text(path, encoding, "\n") as handle:
        first = next(handle, "")
        if first:
            yield first.removeprefix("\ufeff").rstrip("\r\n")
        for line in handle:
            yield line.rstrip("\r\n")


def _decodable(text: str, path: Path, number: int, cfg: DataConfig, tally: Tally) -> bool:
    """False, and tallied, for text with NUL (UTF-16 read as UTF-8, say) or bytes the codec could not
    decode (escaped as lone surrogates, which no UTF-8 encoder takes)."""
    if "\x00" not in text:
        if text.isascii():  # O(1) in CPython: the common case costs nothing more
            return True
        try:
            text.encode("utf-8")
            return True
        except UnicodeEncodeError:
            pass
    tally.undecodable(path, number, text.encode(cfg.encoding, "surrogateescape"))
    return False


def _is_header(fields: list[str], cfg: DataConfig, path: Path) -> bool:
    """``data.header``, or when it is null, whether the fields are the names in ``data.columns``."""
    if cfg.header is not None:
        return cfg.header
    names, columns = [f.strip().lower() for f in fields], [c.lower() for c in cfg.columns]
    if names != columns and sorted(names) == sorted(columns):
        raise DataError(
            f"{path}: line 1 names the columns {','.join(names)} but data.columns is "
            f"[{','.join(cfg.columns)}]: set data.columns=[{','.join(names)}]"
        )
    if names == columns:
        log.info("%s: line 1 names the columns (%s): read as a header, not a pair", path, ",".join(names))
    return names == columns


def _column_fix(found: int, kind: str, columns: list[str]) -> str:
    if found == 1:
        other = "a comma-separated file needs the .csv suffix" if kind == "tab" else "is it a TSV?"
        return f"it holds no {kind}: one goes between columns ({other})"
    return (
        f"it has {found} {kind}-separated fields where data.columns [{','.join(columns)}] names "
        f"{len(columns)}: give data.columns one name per column"
    )


def _fields(
    rows: Iterator[tuple[int, list[str]]], kind: str, source: Source, cfg: DataConfig, tally: Tally
) -> Iterator[Record]:
    """Records of a TSV or CSV: the header skipped, rows with the wrong field count tallied."""
    path, columns = source.files[0], list(cfg.columns)
    src, tgt = columns.index(cfg.source_lang), columns.index(cfg.target_lang)
    first = True
    for number, fields in rows:
        if not fields or (len(fields) == 1 and not fields[0].strip()):  # a blank line
            continue
        if first:
            first = False
            if _is_header(fields, cfg, path):
                continue
        if len(fields) != len(columns):
            tally.bad("wrong_columns", path, number, _column_fix(len(fields), kind, columns))
            continue
        yield number, fields[src], fields[tgt]


def _read_tsv(source: Source, cfg: DataConfig, tally: Tally) -> Iterator[Record]:
    path = source.files[0]
    rows = (
        (number, line.split("\t"))
        for number, line in enumerate(_lines(path, cfg.encoding), 1)
        if line.strip() and _decodable(line, path, number, cfg, tally)
    )
    yield from _fields(rows, "tab", source, cfg, tally)


def _csv_rows(path: Path, cfg: DataConfig, tally: Tally) -> Iterator[tuple[int, list[str]]]:
    """Each record with the line it starts on (a quoted field may hold line breaks)."""
    with _text(path, cfg.encoding, "") as handle:
        reader = csv.reader(handle)
        start = 1
        try:
            for fields in reader:
                if start == 1 and fields:
                    fields[0] = fields[0].removeprefix("\ufeff")
                if _decodable("\n".join(fields), path, start, cfg, tally):
                    yield start, fields
                start = reader.line_num + 1
        except csv.Error as err:
            raise DataError(f"{path}: line {reader.line_num}: {err} (a quote that is never closed?)") from err


def _read_csv(source: Source, cfg: DataConfig, tally: Tally) -> Iterator[Record]:
    yield from _fields(_csv_rows(source.files[0], cfg, tally), "comma", source, cfg, tally)


def _keyed(record: dict, cfg: DataConfig) -> tuple[Any, Any] | None:
    """A record's values for the two languages: top-level keys, or nested under the field."""
    nested = record.get(cfg.hub_translation_field) if cfg.hub_translation_field else None
    for holder in (record, nested):
        if isinstance(holder, dict) and cfg.source_lang in holder and cfg.target_lang in holder:
            return holder[cfg.source_lang], holder[cfg.target_lang]
    return None


def _read_jsonl(source: Source, cfg: DataConfig, tally: Tally) -> Iterator[Record]:
    path = source.files[0]
    keys = f'{{"{cfg.source_lang}": ..., "{cfg.target_lang}": ...}}'
    for number, line in enumerate(_lines(path, cfg.encoding), 1):
        if not line.strip() or not _decodable(line, path, number, cfg, tally):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            tally.bad("bad_json", path, number, f"each line must hold one JSON object {keys}")
        elif (values := _keyed(record, cfg)) is None:
            fix = f"each record needs {keys} (data.direction), optionally under {cfg.hub_translation_field!r}"
            tally.bad("missing_language", path, number, fix)
        else:
            yield number, *values


def _columns(table: pa.Table, cfg: DataConfig, where: Path) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """The two languages' columns: top-level ones, or fields of the nested struct column."""
    langs, field = (cfg.source_lang, cfg.target_lang), cfg.hub_translation_field
    if all(lang in table.column_names for lang in langs):
        return table.column(langs[0]), table.column(langs[1])
    if field in table.column_names and pa.types.is_struct(table.column(field).type):
        nested = table.column(field)
        if all(nested.type.get_field_index(lang) >= 0 for lang in langs):
            return pc.struct_field(nested, langs[0]), pc.struct_field(nested, langs[1])
    raise DataError(
        f"{where} has no columns {langs[0]} and {langs[1]} (data.direction), nor a {field!r} field "
        f"holding them; its columns: {', '.join(table.column_names)}"
    )


def _rows_of(tables: Iterator[pa.Table], cfg: DataConfig, where: Path) -> Iterator[Record]:
    start = 1
    for table in tables:
        src, tgt = _columns(table, cfg, where)
        pairs = zip(src.to_pylist(), tgt.to_pylist(), strict=True)
        yield from ((start + i, s, t) for i, (s, t) in enumerate(pairs))
        start += len(table)


def _read_parquet(source: Source, cfg: DataConfig, tally: Tally) -> Iterator[Record]:
    batches = pq.ParquetFile(source.files[0]).iter_batches(batch_size=_BATCH)
    yield from _rows_of((pa.Table.from_batches([b]) for b in batches), cfg, source.files[0])


def _read_saved(source: Source, cfg: DataConfig, tally: Tally) -> Iterator[Record]:
    folder = source.files[0]
    saved = datasets.load_from_disk(str(folder))
    if isinstance(saved, datasets.DatasetDict):
        if cfg.hub_split not in saved:
            raise DataError(f"{folder} holds the splits {', '.join(saved)}: choose one with data.hub_split")
        saved = saved[cfg.hub_split]
    yield from _rows_of(saved.with_format("arrow").iter(batch_size=_BATCH), cfg, folder)


def _line_counts_differ(source: Source, counts: list[int]) -> DataError:
    listed = ", ".join(f"{p} has {count:,} lines" for p, count in zip(source.files, counts, strict=True))
    return DataError(f"aligned files differ in length: {listed}; line N of each must translate line N")


def _read_aligned(source: Source, cfg: DataConfig, tally: Tally) -> Iterator[Record]:
    """Line N of every file together; a line undecodable in any file is one malformed record."""
    columns = list(cfg.columns)
    src, tgt = columns.index(cfg.source_lang), columns.index(cfg.target_lang)
    streams = [_lines(path, cfg.encoding) for path in source.files]
    end = object()
    for number, lines in enumerate(zip_longest(*streams, fillvalue=end), 1):
        if end in lines:  # a file ended: count what the others hold
            pairs = zip(lines, streams, strict=True)
            counts = [number - (line is end) + sum(1 for _ in more) for line, more in pairs]
            raise _line_counts_differ(source, counts)
        if not any(line.strip() for line in lines):
            continue
        if all(_decodable(line, p, number, cfg, tally) for line, p in zip(lines, source.files, strict=True)):
            yield number, lines[src], lines[tgt]


@dataclass(frozen=True)
class Format:
    """How one format is read: the reader, the data.* options that change what it yields (the
    corpus cache keys on them), and what one record is called in messages."""

    read: Callable[[Source, DataConfig, Tally], Iterator[Record]]
    options: tuple[str, ...]
    unit: str


FORMATS = {
    "tsv": Format(_read_tsv, ("encoding", "header"), "line"),
    "csv": Format(_read_csv, ("encoding", "header"), "line"),
    "jsonl": Format(_read_jsonl, ("encoding", "hub_translation_field"), "line"),
    "parquet": Format(_read_parquet, ("hub_translation_field",), "row"),
    DATASETS: Format(_read_saved, ("hub_translation_field", "hub_split"), "row"),
    ALIGNED: Format(_read_aligned, ("encoding",), "line"),
}


def _tally_unusable(values: tuple, number: int, files: list[Path], cfg: DataConfig, tally: Tally) -> None:
    for lang, file, value in zip((cfg.source_lang, cfg.target_lang), files, values, strict=True):
        if value is not None and not isinstance(value, str):
            tally.bad("not_text", file, number, f"its {lang} value is a {type(value).__name__}, not text")
            return
        if not (value or "").strip():
            fix = f"its {lang} side is empty: remove such lines, or raise data.max_malformed_share"
            tally.bad("empty_side", file, number, fix)
            return


def read_pairs(source: Source, cfg: DataConfig, tally: Tally) -> Iterator[tuple[str, str]]:
    """(source, target) of every record with text on both sides, stripped; tallies the rest."""
    columns = list(cfg.columns)
    files = [source.file_of(columns.index(lang)) for lang in (cfg.source_lang, cfg.target_lang)]
    for number, src, tgt in FORMATS[source.format].read(source, cfg, tally):
        if isinstance(src, str) and isinstance(tgt, str):
            src_text, tgt_text = src.strip(), tgt.strip()
            if src_text and tgt_text:
                tally.pairs += 1
                yield src_text, tgt_text
                continue
        _tally_unusable((src, tgt), number, files, cfg, tally)
