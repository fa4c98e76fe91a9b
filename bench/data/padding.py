"""Padding of token-budget batches on the bundled corpus, against random batches and static shapes.

The training split of the default data settings, batched as the token-budget sampler batches it
(pairs of similar length together) and, for comparison, in random batches of a fixed size that
gives as many batches; the share of the source and target tensors that is padding, over all batches.
With static shapes, both tensors of a batch are padded to its rung and to its rung's rows (filler
rows count as padding), on ladders of several growths and on few-shape ladders: the rungs that pad
the epoch's pairs least for 8, 6, 5 and 4 shapes, and the GPU recipe's ``data.shape_rungs``
(labelled where it is one of them). The ratios are the default ladder's padding over the
token-budget batches', in points, and the GPU recipe's ladder's over the default's. With
``--record``, a table record of the ladders for docs/records/; ``--max-tokens`` sets the token
budget (the GPU recipe's is 16384), ``--growths`` the geometric ladders.

    python -m bench.data.padding --max-tokens 16384 --growths 1.125 \
        --record docs/records/static-shapes-few.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
from omegaconf import OmegaConf

from bench.lib.measure import (
    CORPUS,
    ROOT,
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
    "padding_points_recipe_over_default": 2.0,  # the GPU recipe's few shapes pad about as the default's
}
LADDERS = (1.0625, GROWTH, 1.25, 1.5)  # growths of the ladders compared: more rungs, less padding
FEW = (8, 6, 5, 4)  # shapes of the fitted ladders compared
RECIPE = ROOT / "configs" / "experiment" / "spa_en_gpu.yaml"  # its data.shape_rungs: the GPU recipe's ladder
RECIPE_LABEL = "the GPU recipe's"

HEADER = [
    "ladder",
    "rungs",
    "shapes seen",
    "batches",
    "padding",
]


def _padding(src_len: np.ndarray, tgt_len: np.ndarray, batches: list[np.ndarray]) -> float:
    """Share of the src (B, S) and tgt (B, T) tensors that is padding, over all batches."""
    real = padded = 0
    for batch in batches:
        s, t = src_len[batch] + 1, tgt_len[batch] + 1  # EOS on the source, BOS/EOS on the target
        real += s.sum() + t.sum()
        padded += len(batch) * (s.max() + t.max())
    return 1.0 - real / padded


def fitted_rungs(lengths: np.ndarray, count: int, top: int) -> tuple[int, ...]:
    """The ``count`` rungs, topped by ``top``, that round the padded ``lengths`` (N,) up least: the
    sum of the pairs' rungs is smallest (dynamic programming over the lengths' histogram)."""
    counts = np.bincount(lengths, minlength=top + 1)[: top + 1]
    below = np.concatenate([[0], np.cumsum(counts)])  # below[b]: pairs shorter than b
    cost = {(0, 0): (0.0, ())}  # (rungs used, last rung): (sum of the pairs' rungs, the rungs)
    for used in range(1, count + 1):
        for last in range(2, top + 1):  # a pair has 2 tokens at least (BOS/EOS)
            options = [
                (spent + last * (below[last + 1] - below[prev + 1]), (*rungs, last))
                for (n, prev), (spent, rungs) in cost.items()
                if n == used - 1 and prev < last
            ]
            if options:
                cost[used, last] = min(options)
    return cost[count, top][1]


def _static_padding(src_len: np.ndarray, tgt_len: np.ndarray, shapes: StaticShapes) -> tuple[float, int, int]:
    """Padding of an epoch in ``shapes``, src and tgt (rows, rung) each; the shapes the epoch has
    and its batches."""
    lengths = np.maximum(src_len, tgt_len) + 1
    sampler = TokenBudgetBatchSampler(shapes.rounded(lengths), shapes.max_tokens, True, seed=0)
    seen = [shapes.shape(int(lengths[batch].max())) for batch in sampler]
    real = (src_len + 1).sum() + (tgt_len + 1).sum()
    padded = sum(2 * rows * rung for rows, rung in seen)
    return 1.0 - real / padded, len(set(seen)), len(seen)


def _ladders(cfg: DataConfig, lengths: np.ndarray, growths: tuple[float, ...]) -> dict[str, StaticShapes]:
    """The ladders compared, by row label: geometric ones, then fitted few-shape ones, one of which
    may be the GPU recipe's."""
    ladders = {
        f"growth {growth:g}" + (" (the default)" if growth == GROWTH else ""): StaticShapes.of(
            cfg.max_length, cfg.max_tokens, growth
        )
        for growth in growths
    }
    recipe = StaticShapes.of(
        cfg.max_length, cfg.max_tokens, rungs=tuple(OmegaConf.load(RECIPE).data.shape_rungs)
    )
    for count in FEW:
        shapes = StaticShapes.of(
            cfg.max_length, cfg.max_tokens, rungs=fitted_rungs(lengths, count, cfg.max_length + 1)
        )
        ladders[f"fitted, {count} shapes" + (f" ({RECIPE_LABEL})" if shapes == recipe else "")] = shapes
    if not any(RECIPE_LABEL in label for label in ladders):
        ladders[RECIPE_LABEL] = recipe
    return ladders


def padding_report(
    cache_dir: Path, max_tokens: int, growths: tuple[float, ...]
) -> tuple[float, float, int, list[list[str]], dict[str, float]]:
    """Padding of token-budget batches vs random batches with the same mean tokens per batch; the
    rows of the static ladders and the ratios: the default ladder's points over the token-budget
    batches, the GPU recipe's over the default ladder's."""
    cfg = DataConfig(path=str(CORPUS), cache_dir=str(cache_dir), max_tokens=max_tokens)
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
    for label, shapes in _ladders(cfg, np.maximum(src_len, tgt_len) + 1, growths).items():
        padding, seen, batches = _static_padding(src_len, tgt_len, shapes)
        points[label] = 100 * (padding - budget_padding)
        rungs = ",".join(map(str, shapes.rungs)) if len(shapes.rungs) <= max(FEW) else str(len(shapes.rungs))
        cells = [rungs, str(seen), str(batches), f"{100 * padding:.1f} %"]
        rows.append([label, *cells])
    rows.append(["none: token-budget batches", "", "", str(len(budget)), f"{100 * budget_padding:.1f} %"])
    default = points[f"growth {GROWTH:g} (the default)"]
    recipe = next(value for label, value in points.items() if RECIPE_LABEL in label)
    ratios = {"padding_points_static_shapes": default, "padding_points_recipe_over_default": recipe - default}
    return budget_padding, _padding(src_len, tgt_len, fixed), fixed_size, rows, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, help="write the table record of the static ladders here")
    parser.add_argument(
        "--growths", type=float, nargs="+", default=LADDERS, help="geometric ladders compared"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=DataConfig.max_tokens, help="token budget of a training batch"
    )
    add_target_option(parser, TARGETS)
    args = parser.parse_args()
    machine = describe()
    print(machine)
    with tempfile.TemporaryDirectory() as scratch:
        budget, fixed, fixed_size, rows, ratios = padding_report(
            Path(scratch), args.max_tokens, tuple(args.growths)
        )
    print(f"padding: token budget {budget:.3f}, random batches of {fixed_size} {fixed:.3f}")
    header = [f"{HEADER[0]} (data.max_tokens={args.max_tokens})", *HEADER[1:]]
    for row in [header, *rows]:
        print(" | ".join(row))
    goals = targets(args)
    for name, value, digits in (
        ("padding_fraction_token_budget", budget, 3),
        *((n, v, 2) for n, v in ratios.items()),
    ):
        print(ratio_line(name, value, target_for(name, goals), digits=digits))
    if args.record:
        notes = (
            f"python -m bench.data.padding --max-tokens {args.max_tokens}: the bundled corpus's training "
            "split, epoch 0 (seed 0); padding is the share of the src and tgt tensors' slots, filler rows "
            "included, that hold no token; a fitted ladder's rungs pad the epoch's pairs least for its "
            "number of shapes"
        )
        write_record(args.record, table_record(args.record.stem, machine, notes, header, rows, ratios))


if __name__ == "__main__":
    main()
