"""The captured training step (``compile=true`` with ``data.static_shapes=true``): one compile per
batch shape, and the losses and weights of eager training, step by step."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from seq2seq import capture
from seq2seq.config import ModelConfig
from seq2seq.data.batching import Batch, collate
from seq2seq.data.static_shapes import StaticShapes
from seq2seq.data.tokenizers.tokenizer import PAD_ID
from seq2seq.launch.start import start_run
from seq2seq.machine.hardware import compile_blocker
from seq2seq.model import Transformer
from seq2seq.training.captured_step import (
    CapturedStep,
    compile_cache,
    device_name,
    model_shape,
)
from seq2seq.training.loss import LossSums, sequence_loss
from seq2seq.training.optimizers import adamw
from tests.helpers.compose import tiny_job

SHAPES = StaticShapes.of(max_length=20, max_tokens=128)


def static_batches(lengths: list[tuple[int, int]], vocab: int) -> list[Batch]:
    """Batches of random pairs, each padded to its rung's shape: (pairs, longest side) each."""
    rng = np.random.default_rng(0)
    return [
        SHAPES.pad(
            collate(
                [
                    {"src_ids": rng.integers(4, vocab, rng.integers(1, longest + 1)).tolist(), "tgt_ids": ids}
                    for ids in (rng.integers(4, vocab, longest).tolist() for _ in range(pairs))
                ]
            )
        )
        for pairs, longest in lengths
    ]


def eager_sums(model: Transformer, batch: Batch) -> LossSums:
    """The eager step's loss: gathered at the real target tokens."""
    states = model.decode_states(batch.tgt_in, *model.encode(batch.src))  # (B, T, D)
    return sequence_loss(states, model.generator.weight, batch.tgt_out, 0.1, PAD_ID, batch.tgt_real)


def train_steps(
    model: Transformer, batches: list[Batch], sums_of: Callable[[Batch], LossSums]
) -> list[tuple[float, float, int]]:
    """An AdamW step on each batch; each step's (loss, NLL, hits)."""
    optimizer = adamw(model.parameters(), fused=True, lr=1e-2)
    seen = []
    for batch in batches:
        sums = sums_of(batch)
        (sums.loss / sums.tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seen.append((sums.loss.item() / sums.tokens, sums.nll.item(), int(sums.correct)))
    return seen


def test_the_captured_step_compiles_once_per_shape_and_trains_as_eager(
    tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = CompileCounterWithBackend("aot_eager")  # dynamo and autograd's graphs, no C++ compiler
    monkeypatch.setattr(capture, "BACKEND", counter)
    cfg = replace(tiny_model_cfg, n_encoder_layers=1, n_decoder_layers=1)
    batches = static_batches([(3, 5), (4, 11), (2, 5), (2, 12)], vocab=40)
    assert len({batch.src.shape for batch in batches}) == 2  # each shape twice
    torch.manual_seed(0)
    eager = Transformer(cfg, 40, 40)
    captured = Transformer(cfg, 40, 40)
    captured.load_state_dict(eager.state_dict())
    lines = []

    def sums_of(batch: Batch) -> LossSums:
        sums = step(batch)
        lines.append(step.step_ended())
        return sums

    expected = train_steps(eager, batches, lambda batch: eager_sums(eager, batch))
    with torch._dynamo.config.patch(recompile_limit=1):  # below the shapes: new shapes may compile
        step = CapturedStep(captured, 0.1)
        got = train_steps(captured, batches, sums_of)
        assert torch._dynamo.config.recompile_limit == 1  # lifted only while a new shape compiled
    assert counter.frame_count == 2
    for (loss, nll, hits), (want_loss, want_nll, want_hits) in zip(got, expected, strict=True):
        assert loss == pytest.approx(want_loss, rel=1e-5) and nll == pytest.approx(want_nll, rel=1e-5)
        assert hits == want_hits
    for name, weight in eager.state_dict().items():
        torch.testing.assert_close(captured.state_dict()[name], weight, rtol=1e-4, atol=1e-5, msg=name)
    assert [line is not None for line in lines] == [True, True, False, False]  # a new shape's step
    rows, length = batches[1].src.shape
    assert lines[1].startswith(f"compiled the training step for batches of {rows} x {length} tokens in")
    assert f"(2 shapes so far, {step.compile_seconds:.1f} s in all)" in lines[1]


def test_the_compile_cache_is_another_folder_for_another_torch_device_or_model(
    tiny_model_cfg: ModelConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version, cpu = "2.13.0 abc", device_name(torch.device("cpu"))
    shape = model_shape(Transformer(tiny_model_cfg, 40, 40))
    folder = compile_cache(tmp_path, version, cpu, shape)
    assert folder.parent == tmp_path / "compile"
    assert compile_cache(tmp_path, version, cpu, model_shape(Transformer(tiny_model_cfg, 40, 40))) == folder
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "ANOTHER_ISA")
    others = [
        compile_cache(tmp_path, "2.12.0 abc", cpu, shape),
        compile_cache(tmp_path, "2.13.0 def", cpu, shape),
        compile_cache(tmp_path, version, device_name(torch.device("cpu")), shape),
        compile_cache(tmp_path, version, "cuda NVIDIA H200 sm_90", shape),
        compile_cache(tmp_path, version, cpu, model_shape(Transformer(tiny_model_cfg, 41, 41))),
        compile_cache(
            tmp_path, version, cpu, model_shape(Transformer(replace(tiny_model_cfg, d_ff=48), 40, 40))
        ),
        compile_cache(
            tmp_path,
            version,
            cpu,
            model_shape(Transformer(replace(tiny_model_cfg, activation="gelu"), 40, 40)),
        ),
    ]
    assert len({folder, *others}) == 1 + len(others)


def test_the_inductor_step_compiles_into_the_cache_of_its_torch_device_and_model(
    tiny_model_cfg: ModelConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        torch, "compile", lambda fn, **kwargs: fn
    )  # what inductor would build is not the point
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "elsewhere"))
    # torch's own patch, not monkeypatch: pytest 9 undoes a config module's attribute by deleting it
    with (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        model = Transformer(tiny_model_cfg, 40, 40)
        CapturedStep(model, 0.1, backend="inductor", cache_root=tmp_path)(static_batches([(2, 5)], 40)[0])
        version = f"{torch.__version__} {torch.version.git_version}"
        folder = compile_cache(tmp_path, version, device_name(torch.device("cpu")), model_shape(model))
        assert torch._inductor.runtime.cache_dir_utils.cache_dir() == str(folder) and folder.is_dir()
        assert torch._inductor.config.fx_graph_cache and torch._functorch.config.enable_autograd_cache


@pytest.mark.skipif(compile_blocker("cpu") is not None, reason="compile=true needs a C++ compiler")
def test_a_run_with_compile_and_static_shapes_trains_through_the_captured_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(capture, "BACKEND", counter)
    caplog.set_level(logging.INFO, logger="seq2seq.training.module")
    overrides = ("compile=true", "data.static_shapes=true", "trainer.max_epochs=-1", "trainer.max_steps=2")
    limit = torch._dynamo.config.recompile_limit
    metrics = start_run(tiny_job(tmp_path / "run", tmp_path / "cache", *overrides))
    assert torch._dynamo.config.recompile_limit == limit  # no process-wide change
    assert 1 <= counter.frame_count <= 2 and np.isfinite(metrics["train/loss"])
    compiled = [record.message for record in caplog.records if record.message.startswith("compiled the")]
    assert len(compiled) == counter.frame_count
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
@pytest.mark.skipif(compile_blocker("cpu") is not None, reason="inductor's CPU backend builds C++")
def test_the_inductor_compiled_step_trains_as_eager_on_a_cpu(tiny_model_cfg: ModelConfig) -> None:
    """The path as a run takes it on a CPU: inductor's kernels, no CUDA graphs (a minute or more)."""
    cfg = replace(tiny_model_cfg, n_encoder_layers=1, n_decoder_layers=1)
    batches = static_batches([(3, 5), (2, 5), (3, 5)], vocab=40)
    torch.manual_seed(0)
    eager = Transformer(cfg, 40, 40)
    captured = Transformer(cfg, 40, 40)
    captured.load_state_dict(eager.state_dict())
    expected = train_steps(eager, batches, lambda batch: eager_sums(eager, batch))
    got = train_steps(captured, batches, CapturedStep(captured, 0.1))
    for (loss, nll, hits), (want_loss, want_nll, want_hits) in zip(got, expected, strict=True):
        assert loss == pytest.approx(want_loss, rel=1e-4) and nll == pytest.approx(want_nll, rel=1e-4)
        assert hits == want_hits
