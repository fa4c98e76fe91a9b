"""Padding of an epoch of the bundled corpus: streamed (``data.streaming=true``, batches sorted within
windows of blocks) against the full sort of the in-memory path.

Both data modules are built with the default data settings; the share of each batch's padded slots
(batch size x its longest pair) that hold no token, over the epoch. With ``--record``, a table
record for docs/records/.

    python -m bench.data.streaming_padding --record docs/records/streaming-padding-NAME.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from bench.lib.measure import (
    add_target_option,
    print_ratios,
    table_record,
    targets,
    write_record,
)
from seq2seq.config import DataConfig
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.machine.hardware import describe

TARGETS = {"streamed_padding_points_over_full_sort": 1.5}  # at most this many points more padding

HEADER = [
    "epoch 0, data.max_tokens=4096",
    "padding, full sort (in memory)",
    "padding, streamed windows",
]


def padding(batches: list[list[int]], lengths: np.ndarray) -> float:
    """Share of the batches' padded slots (batch size x its longest pair) that hold no token."""
    real = sum(int(lengths[batch].sum()) for batch in batches)
    return 1.0 - real / sum(len(batch) * int(lengths[batch].max()) for batch in batches)


def padding_rows(scratch: Path) -> tuple[list[list[str]], list[tuple[str, float]]]:
    """Padding of an epoch of the bundled corpus, streamed (windows) against the full sort in memory."""
    memory = TranslationDataModule(DataConfig(cache_dir=str(scratch)))
    memory.setup("fit")
    full = padding(list(memory.train_dataloader().batch_sampler), memory.lengths["train"])
    streamed = TranslationDataModule(DataConfig(cache_dir=str(scratch), streaming=True))
    streamed.setup("fit")
    store = streamed.streamed.store
    lengths = np.concatenate([store.block_lengths(block) for block in range(store.blocks)])
    windowed = padding(list(streamed.train_dataloader().batch_sampler), lengths)
    row = [
        f"bundled corpus, {store.rows} pairs, {store.blocks} blocks",
        f"{100 * full:.2f} %",
        f"{100 * windowed:.2f} %",
    ]
    return [row], [("streamed_padding_points_over_full_sort", 100 * (windowed - full))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, help="write the table record here")
    add_target_option(parser, TARGETS)
    args = parser.parse_args()
    machine = describe()
    print(machine)
    with tempfile.TemporaryDirectory() as scratch:
        table, ratios = padding_rows(Path(scratch))
    print(table)
    goals = targets(args)
    print_ratios(ratios, goals, digits=3)
    if args.record:
        notes = "python -m bench.data.streaming_padding"
        write_record(args.record, table_record(args.record.stem, machine, notes, HEADER, table, dict(ratios)))


if __name__ == "__main__":
    main()
