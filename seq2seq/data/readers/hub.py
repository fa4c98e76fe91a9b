"""A Hugging Face hub dataset (``data.hub_dataset``, opt-in: it needs internet) read into the pairs
a local corpus gives: ``src`` and ``tgt`` columns in ``data.direction``, stripped. A row that lacks
a side is dropped and counted, but not held to ``data.max_malformed_share``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import datasets

from seq2seq.config import DataError
from seq2seq.data.readers.registry import FEATURES
from seq2seq.data.readers.sources import Reading


@dataclass(frozen=True)
class HubDataset:
    """``data.hub_dataset`` and ``data.hub_config``: which dataset of the hub to read."""

    name: str
    config: str | None


def _hub_pairs(batch: dict, field: str | None, src_lang: str, tgt_lang: str) -> dict[str, list[str]]:
    """Both languages' texts: their columns, or their keys in ``field`` where there are none (as locally)."""
    if field and not (src_lang in batch and tgt_lang in batch):
        src, tgt = [row[src_lang] for row in batch[field]], [row[tgt_lang] for row in batch[field]]
    else:
        src, tgt = batch[src_lang], batch[tgt_lang]
    return {"src": [(text or "").strip() for text in src], "tgt": [(text or "").strip() for text in tgt]}


def _both_sides(batch: dict) -> list[bool]:
    return [bool(src) and bool(tgt) for src, tgt in zip(batch["src"], batch["tgt"], strict=True)]


def read_hub(hub: HubDataset, reading: Reading) -> tuple[datasets.Dataset, dict[str, int]]:
    """The hub dataset's pairs and their counts, in the layout of a local corpus's."""
    raw = datasets.load_dataset(hub.name, hub.config, split=reading.hub_split)
    pairs = raw.map(
        partial(
            _hub_pairs,
            field=reading.hub_translation_field,
            src_lang=reading.source_lang,
            tgt_lang=reading.target_lang,
        ),
        batched=True,
        remove_columns=raw.column_names,
        features=FEATURES,
    )
    kept = pairs.filter(_both_sides, batched=True)
    if len(kept) == 0:
        raise DataError(f"hub dataset {hub.name} holds no usable {reading.direction} pairs")
    empty = len(pairs) - len(kept)  # rows lacking a side: dropped, not held to max_malformed_share
    return kept, {"pairs": len(kept), "malformed_lines": empty, "malformed": {}, "unit": "row"}
