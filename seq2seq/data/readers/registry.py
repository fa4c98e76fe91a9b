"""One reader per corpus format, in a registry keyed by format: each turns a located corpus into
numbered (source, target) values and tallies the records it cannot read; :func:`clean_pairs`
then keeps the pairs with text on both sides.

Which field holds which language: TSV, CSV and aligned text by position (``data.columns`` names
the language of each column or file, and a column that is not a language gets any other name);
JSONL, parquet and ``save_to_disk`` folders by name, a key or column per language of
``data.direction``, or those keys nested under ``data.hub_translation_field`` as ``datasets``
writes translation data (``{"translation": {"en": ..., "es": ...}}``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from seq2seq.config import DataError
from seq2seq.data.readers.malformed import Tally
from seq2seq.data.readers.sources import ALIGNED, DATASETS, Reading, Source
from seq2seq.data.readers.text import Record, read_aligned, read_csv, read_jsonl, read_tsv

_BATCH = 10_000  # rows per Arrow batch read from parquet or a save_to_disk folder


def _columns(table: pa.Table, reading: Reading, where: Path) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """The two languages' columns: top-level ones, or fields of the nested struct column."""
    langs, field = (reading.source_lang, reading.target_lang), reading.hub_translation_field
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


def _rows_of(tables: Iterator[pa.Table], reading: Reading, where: Path) -> Iterator[Record]:
    start = 1
    for table in tables:
        src, tgt = _columns(table, reading, where)
        pairs = zip(src.to_pylist(), tgt.to_pylist(), strict=True)
        yield from ((start + i, s, t) for i, (s, t) in enumerate(pairs))
        start += len(table)


def _read_parquet(source: Source, reading: Reading, tally: Tally) -> Iterator[Record]:
    batches = pq.ParquetFile(source.files[0]).iter_batches(batch_size=_BATCH)
    yield from _rows_of((pa.Table.from_batches([b]) for b in batches), reading, source.files[0])


def _read_saved(source: Source, reading: Reading, tally: Tally) -> Iterator[Record]:
    folder = source.files[0]
    saved = datasets.load_from_disk(str(folder))
    if isinstance(saved, datasets.DatasetDict):
        if reading.hub_split not in saved:
            raise DataError(f"{folder} holds the splits {', '.join(saved)}: choose one with data.hub_split")
        saved = saved[reading.hub_split]
    yield from _rows_of(saved.with_format("arrow").iter(batch_size=_BATCH), reading, folder)


@dataclass(frozen=True)
class Format:
    """How one format is read: the reader, the data.* options that change what it yields (the
    corpus cache keys on them), and what one record is called in messages."""

    read: Callable[[Source, Reading, Tally], Iterator[Record]]
    options: tuple[str, ...]
    unit: str


FORMATS = {
    "tsv": Format(read_tsv, ("encoding", "header"), "line"),
    "csv": Format(read_csv, ("encoding", "header"), "line"),
    "jsonl": Format(read_jsonl, ("encoding", "hub_translation_field"), "line"),
    "parquet": Format(_read_parquet, ("hub_translation_field",), "row"),
    DATASETS: Format(_read_saved, ("hub_translation_field", "hub_split"), "row"),
    ALIGNED: Format(read_aligned, ("encoding",), "line"),
}


def _tally_unusable(values: tuple, number: int, files: list[Path], reading: Reading, tally: Tally) -> None:
    for lang, file, value in zip((reading.source_lang, reading.target_lang), files, values, strict=True):
        if value is not None and not isinstance(value, str):
            tally.bad("not_text", file, number, f"its {lang} value is a {type(value).__name__}, not text")
            return
        if not (value or "").strip():
            fix = f"its {lang} side is empty: remove such lines, or raise data.max_malformed_share"
            tally.bad("empty_side", file, number, fix)
            return


def clean_pairs(source: Source, reading: Reading, tally: Tally) -> Iterator[tuple[str, str]]:
    """(source, target) of every record with text on both sides, stripped; tallies the rest."""
    columns = list(reading.columns)
    files = [source.file_of(columns.index(lang)) for lang in (reading.source_lang, reading.target_lang)]
    for number, src, tgt in FORMATS[source.format].read(source, reading, tally):
        if isinstance(src, str) and isinstance(tgt, str):
            src_text, tgt_text = src.strip(), tgt.strip()
            if src_text and tgt_text:
                tally.pairs += 1
                yield src_text, tgt_text
                continue
        _tally_unusable((src, tgt), number, files, reading, tally)
