"""Readers of the corpus formats that are text files: TSV, CSV, JSONL and aligned plain text, in
``data.encoding``. A line the encoding cannot decode, or that holds NUL (UTF-16 read as UTF-8),
is tallied as undecodable and skipped; only ``\\n`` ends a line, so a stray CR stays in its field.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import zip_longest
from pathlib import Path
from typing import Any, TextIO

from seq2seq.config import DataError
from seq2seq.data.readers.malformed import Tally
from seq2seq.data.readers.sources import Reading, Source

log = logging.getLogger("seq2seq.data")

Record = tuple[int, Any, Any]  # (line or row number from 1, source value, target value)
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


def _decodable(text: str, path: Path, number: int, reading: Reading, tally: Tally) -> bool:
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
    tally.undecodable(path, number, (text + "\n").encode(reading.encoding, "surrogateescape"))
    return False


def _is_header(fields: list[str], reading: Reading, path: Path) -> bool:
    """``data.header``, or when it is null, whether the fields are the names in ``data.columns``."""
    if reading.header is not None:
        return reading.header
    names, columns = [f.strip().lower() for f in fields], [c.lower() for c in reading.columns]
    if names != columns and sorted(names) == sorted(columns):
        raise DataError(
            f"{path}: line 1 names the columns {','.join(names)} but data.columns is "
            f"[{','.join(reading.columns)}]: set data.columns=[{','.join(names)}]"
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
    rows: Iterator[tuple[int, list[str]]], kind: str, source: Source, reading: Reading, tally: Tally
) -> Iterator[Record]:
    """Records of a TSV or CSV: the header skipped, rows with the wrong field count tallied."""
    path, columns = source.files[0], list(reading.columns)
    src, tgt = columns.index(reading.source_lang), columns.index(reading.target_lang)
    first = True
    for number, fields in rows:
        if not fields or (len(fields) == 1 and not fields[0].strip()):  # a blank line
            continue
        if first:
            first = False
            if _is_header(fields, reading, path):
                continue
        if len(fields) != len(columns):
            tally.bad("wrong_columns", path, number, _column_fix(len(fields), kind, columns))
            continue
        yield number, fields[src], fields[tgt]


def read_tsv(source: Source, reading: Reading, tally: Tally) -> Iterator[Record]:
    """Tab-separated fields, one record a line (``.txt`` too); blank lines are no records."""
    path = source.files[0]
    rows = (
        (number, line.split("\t"))
        for number, line in enumerate(_lines(path, reading.encoding), 1)
        if line.strip() and _decodable(line, path, number, reading, tally)
    )
    yield from _fields(rows, "tab", source, reading, tally)


def _csv_rows(path: Path, reading: Reading, tally: Tally) -> Iterator[tuple[int, list[str]]]:
    """Each record with the line it starts on (a quoted field may hold line breaks)."""
    with _text(path, reading.encoding, "") as handle:
        reader = csv.reader(handle)
        start = 1
        try:
            for fields in reader:
                if start == 1 and fields:
                    fields[0] = fields[0].removeprefix("\ufeff")
                if _decodable("\n".join(fields), path, start, reading, tally):
                    yield start, fields
                start = reader.line_num + 1
        except csv.Error as err:
            raise DataError(f"{path}: line {reader.line_num}: {err} (a quote that is never closed?)") from err


def read_csv(source: Source, reading: Reading, tally: Tally) -> Iterator[Record]:
    """Comma-separated fields as Excel writes them: quotes around a field with commas, quotes or breaks."""
    yield from _fields(_csv_rows(source.files[0], reading, tally), "comma", source, reading, tally)


def _keyed(record: dict, reading: Reading) -> tuple[Any, Any] | None:
    """A record's values for the two languages: top-level keys, or nested under the field."""
    nested = record.get(reading.hub_translation_field) if reading.hub_translation_field else None
    for holder in (record, nested):
        if isinstance(holder, dict) and reading.source_lang in holder and reading.target_lang in holder:
            return holder[reading.source_lang], holder[reading.target_lang]
    return None


def read_jsonl(source: Source, reading: Reading, tally: Tally) -> Iterator[Record]:
    """One JSON object a line, a key per language (other keys ignored), or nested under the field."""
    path = source.files[0]
    keys = f'{{"{reading.source_lang}": ..., "{reading.target_lang}": ...}}'
    for number, line in enumerate(_lines(path, reading.encoding), 1):
        if not line.strip() or not _decodable(line, path, number, reading, tally):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            tally.bad("bad_json", path, number, f"each line must hold one JSON object {keys}")
        elif (values := _keyed(record, reading)) is None:
            nested = reading.hub_translation_field
            fix = f"each record needs {keys} (data.direction), optionally under {nested!r}"
            tally.bad("missing_language", path, number, fix)
        else:
            yield number, *values


def _line_counts_differ(source: Source, counts: list[int]) -> DataError:
    listed = ", ".join(f"{p} has {count:,} lines" for p, count in zip(source.files, counts, strict=True))
    return DataError(f"aligned files differ in length: {listed}; line N of each must translate line N")


def read_aligned(source: Source, reading: Reading, tally: Tally) -> Iterator[Record]:
    """Line N of every file together; a line undecodable in any file is one malformed record."""
    columns = list(reading.columns)
    src, tgt = columns.index(reading.source_lang), columns.index(reading.target_lang)
    streams = [_lines(path, reading.encoding) for path in source.files]
    end = object()
    for number, lines in enumerate(zip_longest(*streams, fillvalue=end), 1):
        if end in lines:  # a file ended: count what the others hold
            pairs = zip(lines, streams, strict=True)
            counts = [number - (line is end) + sum(1 for _ in more) for line, more in pairs]
            raise _line_counts_differ(source, counts)
        if not any(line.strip() for line in lines):
            continue
        if all(
            _decodable(line, p, number, reading, tally) for line, p in zip(lines, source.files, strict=True)
        ):
            yield number, lines[src], lines[tgt]
