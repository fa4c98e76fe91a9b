"""Padding of token-budget batches against random batches of the same mean size, on the bundled corpus.

The training split of the default data settings, batched as the token-budget sampler batches it
(pairs of similar length together) and, for comparison, in random batches of a fixed size that
gives as many batches; the share of the source and target tensors that is padding, over all batches.

    python -m bench.data_padding
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from bench.measure import CORPUS, add_target_option, ratio_line, target_for, targets
from seq2seq.config import DataConfig
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.sampler import TokenBudgetBatchSampler
from seq2seq.hardware import describe

TARGETS = {"padding_fraction_token_budget": 0.10}  # at most this share of the batches' tokens is padding


def _padding(src_len: np.ndarray, tgt_len: np.ndarray, batches: list[np.ndarray]) -> float:
    """Share of the src (B, S) and tgt (B, T) tensors that is padding, over all batches."""
    real = padded = 0
    for batch in batches:
        s, t = src_len[batch] + 1, tgt_len[batch] + 1  # EOS on the source, BOS/EOS on the target
        real += s.sum() + t.sum()
        padded += len(batch) * (s.max() + t.max())
    return 1.0 - real / padded


def padding_report(cache_dir: Path) -> tuple[float, float, int]:
    """Padding of token-budget batches vs random batches with the same mean tokens per batch."""
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
    return _padding(src_len, tgt_len, budget), _padding(src_len, tgt_len, fixed), fixed_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_target_option(parser, TARGETS)
    args = parser.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as scratch:
        budget, fixed, fixed_size = padding_report(Path(scratch))
    print(f"padding: token budget {budget:.3f}, random batches of {fixed_size} {fixed:.3f}")
    name = "padding_fraction_token_budget"
    print(ratio_line(name, budget, target_for(name, targets(args)), digits=3))


if __name__ == "__main__":
    main()
