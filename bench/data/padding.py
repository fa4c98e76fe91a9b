"""Padding of token-budget batches on the bundled corpus, against random batches and static shapes.

The training split of the default data settings, batched as the token-budget sampler batches it
(pairs of similar length together) and, for comparison, in random batches of a fixed size that
gives as many batches; the share of the source and target tensors that is padding, over all batches.
With static shapes, both tensors of a batch are padded to its rung and to its rung's rows (filler
rows count as padding), on ladders of several growths; the ratio is the default ladder's padding
over the token-budget batches', in points. With ``--record``, a table record of the ladders for
docs/records/.

    python -m bench.data.padding --record docs/records/static-shapes-padding.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from bench.lib.measure import (
    CORPUS,
    add_target_option,
    ratio_line,
    table_record,
    target_for,
    targets,
    write_record,
)
from seq2seq.config import DataConfig
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.sampler import TokenBudgetBatchSampler
from seq2seq.data.static_shapes import GROWTH, StaticShapes
from seq2seq.machine.hardware import describe

TARGETS = {
    "padding_fraction_token_budget": 0.10,  # at most this share of the batches' tokens is padding
    "padding_points_static_shapes": 5.0,  # static shapes add at most this many points of padding
}
LADDERS = (1.0625, GROWTH, 1.25, 1.5)  # growths of the ladders compared: more rungs, less padding

HEADER = [
    "ladder growth (data.max_tokens=4096)",
    "rungs",
    "shapes in the epoch",
    "batches",
    "padding",
    "points over token-budget batches",
]


def _padding(src_len: np.ndarray, tgt_len: np.ndarray, batches: list[np.ndarray]) -> float:
    """Share of the src (B, S) and tgt (B, T) tensors that is padding, over all batches."""
    real = padded = 0
    for batch in batches:
        s, t = src_len[batch] + 1, tgt_len[batch] + 1  # EOS on the source, BOS/EOS on the target
        real += s.sum() + t.sum()
        padded += len(batch) * (s.max() + t.max())
    return 1.0 - real / padded


def _static_padding(
    src_len: np.ndarray, tgt_len: np.ndarray, cfg: DataConfig, growth: float
) -> tuple[float, int, int, int]:
    """Padding of an epoch in static shapes, src and tgt (rows, rung) each; the ladder's rungs, the
    shapes the epoch has and its batches."""
    shapes = StaticShapes.of(cfg.max_length, cfg.max_tokens, growth)
    lengths = np.maximum(src_len, tgt_len) + 1
    sampler = TokenBudgetBatchSampler(shapes.rounded(lengths), cfg.max_tokens, True, seed=0)
    seen = [shapes.shape(int(lengths[batch].max())) for batch in sampler]
    real = (src_len + 1).sum() + (tgt_len + 1).sum()
    padded = sum(2 * rows * rung for rows, rung in seen)
    return 1.0 - real / padded, len(shapes.rungs), len(set(seen)), len(seen)


def padding_report(cache_dir: Path) -> tuple[float, float, int, list[list[str]], float]:
    """Padding of token-budget batches vs random batches with the same mean tokens per batch; the
    rows of the static ladders and the default ladder's points over the token-budget batches."""
    cfg = DataConfig(path=str(CORPUS), cache_dir=str(cache_dir))
    dm = TranslationDataModule(cfg)
    dm.setup("fit")
    table = dm.splits["train"].with_format("arrow")
    src_len = pc.list_value_length(table["src_ids"]).to_numpy()
    tgt_len = pc.list_value_length(table["tgt_ids"]).to_numpy()
    sampler = TokenBudgetBatchSampler(np.maximum(src_len, tgt_len) + 1, cfg.max_tokens, True, seed=0)
    budget = [np.asarray(batch) for batch in sampler]
    fixed_size = round(len(src_len) / len(budget))  # same number of batches => same mean tokens
    order = np.random.default_rng(0).permutation(len(src_len))
    fixed = [order[i : i + fixed_size] for i in range(0, len(order), fixed_size)]
    budget_padding = _padding(src_len, tgt_len, budget)
    rows, points = [], {}
    for growth in LADDERS:
        padding, rungs, seen, batches = _static_padding(src_len, tgt_len, cfg, growth)
        points[growth] = 100 * (padding - budget_padding)
        label = f"{growth:g} (the default)" if growth == GROWTH else f"{growth:g}"
        cells = [str(rungs), str(seen), str(batches), f"{100 * padding:.1f} %", f"{points[growth]:.1f}"]
        rows.append([label, *cells])
    rows.append(
        ["none: token-budget batches", "", "", str(len(budget)), f"{100 * budget_padding:.1f} %", "0"]
    )
    return budget_padding, _padding(src_len, tgt_len, fixed), fixed_size, rows, points[GROWTH]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, help="write the table record of the static ladders here")
    add_target_option(parser, TARGETS)
    args = parser.parse_args()
    machine = describe()
    print(machine)
    with tempfile.TemporaryDirectory() as scratch:
        budget, fixed, fixed_size, rows, points = padding_report(Path(scratch))
    print(f"padding: token budget {budget:.3f}, random batches of {fixed_size} {fixed:.3f}")
    for row in [HEADER, *rows]:
        print(" | ".join(row))
    goals = targets(args)
    for name, value, digits in (
        ("padding_fraction_token_budget", budget, 3),
        ("padding_points_static_shapes", points, 2),
    ):
        print(ratio_line(name, value, target_for(name, goals), digits=digits))
    if args.record:
        notes = (
            "python -m bench.data.padding: the bundled corpus's training split, epoch 0 (seed 0); "
            "padding is the share of the src and tgt tensors' slots, filler rows included, that hold no token"
        )
        ratios = {"padding_points_static_shapes": points}
        write_record(args.record, table_record(args.record.stem, machine, notes, HEADER, rows, ratios))


if __name__ == "__main__":
    main()
