"""``data.static_shapes``: a training epoch has at most one batch shape per rung of the ladder, every
batch within the token budget, and filler rows and pad columns change no loss, gradient or output."""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from seq2seq import capture
from seq2seq.config import ConfigError, DataConfig, ModelConfig
from seq2seq.data.batching import Batch, collate
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.sampler import TokenBudgetBatchSampler
from seq2seq.data.static_shapes import GROWTH, StaticShapes, ladder
from seq2seq.data.streamed.batches import StreamedBatchSampler
from seq2seq.data.tokenizers.tokenizer import PAD_ID
from seq2seq.model import Transformer
from seq2seq.training.captured_step import CapturedStep
from seq2seq.training.loss import sequence_loss
from tests.helpers.streamed_store import make_store


@pytest.mark.parametrize("longest", [3, 65, 257])
def test_the_ladder_climbs_geometrically_to_the_longest_length(longest: int) -> None:
    rungs = ladder(longest)
    assert rungs[-1] == longest and rungs[0] == min(4, longest)
    assert all(low < high <= max(low + 1, math.ceil(low * GROWTH)) for low, high in pairwise(rungs))
    assert len(rungs) <= 4 + math.log(longest / 4) / math.log(GROWTH) + 1  # logarithmic in the length


def test_packed_on_rungs_every_batch_fits_its_rungs_rows() -> None:
    lengths = np.random.default_rng(0).integers(2, 66, size=5000)
    shapes = StaticShapes.of(max_length=64, max_tokens=1024)
    rounded = shapes.rounded(lengths)
    batches = [
        batch
        for rank in range(3)
        for batch in TokenBudgetBatchSampler(rounded, 1024, True, 0, rank, world_size=3)
    ]
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        rows, rung = shapes.shape(int(lengths[batch].max()))
        assert len(batch) <= rows and rows * rung <= 1024 and lengths[batch].max() <= rung


@pytest.mark.parametrize("truncate", [False, True])
def test_streamed_batches_counted_from_histograms_are_the_windows_batches(
    tmp_path: Path, truncate: bool
) -> None:
    store = make_store(tmp_path, 300, 7, 3, longest=60)
    shapes = StaticShapes.of(max_length=20, max_tokens=256)
    for epoch in (0, 1):
        made = StreamedBatchSampler(store, 256, 3, 20, truncate, window_blocks=4, shapes=shapes)
        made.set_epoch(epoch)
        windows = made.windows()
        assert made._window_counts().tolist() == [
            len(made.window_batches(w, b)) for w, b in enumerate(windows)
        ]
        assert len(made) == len(list(made))


@pytest.mark.parametrize(
    ("streaming", "rungs"), [(False, None), (True, None), (False, [6, 10]), (True, [6, 10])]
)
def test_an_epoch_has_one_shape_per_rung_at_most_within_the_budget(
    tiny_data_cfg: DataConfig, streaming: bool, rungs: list[int] | None
) -> None:
    cfg = replace(tiny_data_cfg, static_shapes=True, streaming=streaming, max_tokens=256, shape_rungs=rungs)
    datamodule = TranslationDataModule(cfg, seed=0)
    datamodule.setup("fit")
    batches: list[Batch] = list(datamodule.train_dataloader())
    shapes = StaticShapes.of_config(cfg)
    assert shapes.rungs == (ladder(cfg.max_length + 1) if rungs is None else (6, 10, cfg.max_length + 1))
    seen = {batch.src.shape for batch in batches}
    assert len(seen) <= len(shapes.rungs) and len(seen) < len(batches)
    assert {length for _, length in seen} <= set(shapes.rungs)
    for batch in batches:
        assert batch.src.shape == batch.tgt_in.shape == batch.tgt_out.shape == shapes.shape(batch.src.size(1))
        assert batch.src.numel() <= cfg.max_tokens
    pairs = sum(int((batch.tgt_out != PAD_ID).any(1).sum()) for batch in batches)  # fillers have no target
    assert pairs == datamodule.stats["train_pairs"]


@pytest.mark.parametrize("rungs", [[10, 6], [6, 6], [1, 6], [6, 66]])
def test_shape_rungs_that_do_not_climb_within_the_longest_length_are_refused(
    tiny_data_cfg: DataConfig, rungs: list[int]
) -> None:
    with pytest.raises(
        ConfigError, match=r"data.shape_rungs must climb from 2 to at most data.max_length \+ 1 = 65"
    ):
        replace(tiny_data_cfg, max_length=64, shape_rungs=rungs)


@pytest.mark.parametrize("streaming", [False, True])
def test_a_resumed_epoch_goes_on_with_the_batches_left(tiny_data_cfg: DataConfig, streaming: bool) -> None:
    cfg = replace(tiny_data_cfg, static_shapes=True, streaming=streaming, max_tokens=256)
    datamodule = TranslationDataModule(cfg, seed=0)
    datamodule.setup("fit")
    sampler = datamodule.train_dataloader().batch_sampler
    sampler.set_epoch(1)
    whole = list(sampler)
    sampler.continue_epoch([(1, 2)])  # a run of one process stopped after 2 batches
    assert list(sampler) == whole[2:] and len(sampler) == len(whole)


@pytest.mark.slow
def test_a_compiled_step_compiles_once_per_shape(
    tiny_data_cfg: DataConfig, tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The captured step (``compile=true``) over the batches of an epoch's first three shapes (a
    compile each takes seconds here) compiles once per shape."""
    datamodule = TranslationDataModule(replace(tiny_data_cfg, static_shapes=True, max_tokens=256), seed=0)
    datamodule.setup("fit")
    epoch = list(datamodule.train_dataloader())
    first = list(dict.fromkeys(batch.src.shape for batch in epoch))[:3]
    batches = [batch for batch in epoch if batch.src.shape in first]
    vocab = datamodule.tokenizer.src_vocab_size
    model = Transformer(replace(tiny_model_cfg, n_encoder_layers=1, n_decoder_layers=1), vocab, vocab)
    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(capture, "BACKEND", counter)
    step = CapturedStep(model, 0.1)
    for batch in batches:
        sums = step(batch)
        (sums.loss / sums.tokens).backward()
    assert counter.frame_count == len(first) < len(batches)  # shapes recur and compile nothing new


def _step(
    model: Transformer, batch: Batch, written_out: bool
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The training step's loss per target token, the decoder's states and the gradients; with
    ``written_out``, through the explicit softmax (over masked keys alone: 0/0), not the kernel."""
    model.zero_grad()
    weights = ([], {"self": [], "cross": []}) if written_out else (None, None)
    memory, src_mask = model.encode(batch.src, weights[0])
    states = model.decode_states(batch.tgt_in, memory, src_mask, weights[1])  # (B, T, D)
    sums = sequence_loss(states, model.generator.weight, batch.tgt_out, 0.1, PAD_ID, batch.tgt_real)
    loss = sums.loss / sums.tokens
    loss.backward()
    return loss.detach(), states.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("written_out", [False, True])
def test_filler_rows_and_pad_columns_change_no_loss_gradient_or_real_output(
    tiny_model_cfg: ModelConfig, written_out: bool
) -> None:
    torch.manual_seed(0)
    model = Transformer(replace(tiny_model_cfg, dropout=0.0), 40, 40)
    rng = np.random.default_rng(0)
    examples = [
        {"src_ids": rng.integers(4, 40, n).tolist(), "tgt_ids": rng.integers(4, 40, m).tolist()}
        for n, m in [(5, 7), (9, 4), (3, 8)]
    ]
    batch = collate(examples)  # (3, 10) source, (3, 9) target
    padded = StaticShapes((4, 8, 13), max_tokens=130).pad(batch)  # (10, 13): 7 filler rows, pad columns
    assert padded.src.shape == padded.tgt_in.shape == (10, 13)
    assert padded.real_tokens() == batch.real_tokens()

    loss, states, grads = _step(model, batch, written_out)
    padded_loss, padded_states, padded_grads = _step(model, padded, written_out)
    torch.testing.assert_close(padded_loss, loss)
    for name, grad in grads.items():
        torch.testing.assert_close(padded_grads[name], grad, msg=name)
    real = batch.tgt_in != PAD_ID  # (3, 9)
    torch.testing.assert_close(padded_states[:3, :9][real], states[real])
    assert all(torch.isfinite(grad).all() for grad in padded_grads.values())
