"""Token ids of every split, encoded once into memory-mapped Arrow files.

The files hold only what the text cache does not: the id lists of both sides and the padded
length of each pair, row for row in the order of the split's text, so no column is stored twice.
Ids are written as flat Arrow arrays with offsets (no per-row Python objects kept), and the
result is memory-mapped, so memory does not grow with the corpus.
"""

from __future__ import annotations

import logging
from itertools import chain
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
from datasets.table import MemoryMappedTable

from seq2seq.data.batching import pair_lengths
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer

log = logging.getLogger("seq2seq.data")

FEATURES = datasets.Features(
    {
        "src_ids": datasets.List(datasets.Value("int32")),
        "tgt_ids": datasets.List(datasets.Value("int32")),
        "length": datasets.Value("int32"),  # padded cost of the pair, see batching.pair_lengths
    }
)
_BATCH = 10_000  # pairs per tokenizer call and per Arrow record batch
_PROGRESS_EVERY = 500_000  # pairs between progress lines of a long encoding


def _id_lists(rows: list[list[int]]) -> pa.ListArray:
    """Arrow ``list<int32>`` of ``rows`` built from one flat array and its offsets."""
    sizes = np.fromiter(map(len, rows), dtype=np.int32, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    values = np.fromiter(chain.from_iterable(rows), dtype=np.int32, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def _encode_split(name: str, texts: datasets.Dataset, tokenizer: TranslationTokenizer, path: Path) -> None:
    schema = FEATURES.arrow_schema
    done = 0
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for batch in texts.iter(batch_size=_BATCH):
            src, tgt = tokenizer.encode_source(batch["src"]), tokenizer.encode_target(batch["tgt"])
            lengths = pair_lengths(np.fromiter(map(len, src), np.int64), np.fromiter(map(len, tgt), np.int64))
            columns = [_id_lists(src), _id_lists(tgt), pa.array(lengths.astype(np.int32))]
            writer.write_batch(pa.record_batch(columns, schema))
            previous, done = done, done + len(src)
            if done // _PROGRESS_EVERY > previous // _PROGRESS_EVERY:
                log.info("encoding %s: %d of %d pairs", name, done, len(texts))


def encode_splits(texts: datasets.DatasetDict, tokenizer: TranslationTokenizer, directory: Path) -> None:
    """Write ``<split>.arrow`` for every split of ``texts`` into ``directory``."""
    for name, split in texts.items():
        _encode_split(name, split, tokenizer, directory / f"{name}.arrow")


def load_split(directory: Path, name: str) -> datasets.Dataset:
    """One encoded split, memory-mapped; its fingerprint is the cache's name and the split's."""
    table = MemoryMappedTable.from_file(str(directory / f"{name}.arrow"))
    info = datasets.DatasetInfo(features=FEATURES)
    return datasets.Dataset(table, info=info, fingerprint=f"{directory.name}-{name}")


def lengths(dataset: datasets.Dataset) -> np.ndarray:
    """The ``length`` column as one array, shape (N,), without building Python objects."""
    return dataset.with_format("arrow")["length"].to_numpy()
