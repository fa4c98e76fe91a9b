"""The training step's fast paths inside the real loop: the fused AdamW in every CPU precision, with
``trainer.gradient_clip_val`` still applied, and the metrics the step logs."""

from pathlib import Path

import pytest
import torch

from seq2seq.config import validated_run
from seq2seq.launch.start import start_run
from seq2seq.training.module import TranslationModule
from seq2seq.training.optimizers import fused_adamw_applies
from tests.helpers.compose import tiny_run


@pytest.mark.parametrize(
    ("precision", "fused"), [("32-true", True), ("bf16-mixed", True), ("16-mixed", False), ("16-true", False)]
)
def test_the_fused_adamw_is_taken_unless_gradients_are_scaled(precision, fused) -> None:
    assert fused_adamw_applies(precision) == fused


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_cpu_run_steps_the_fused_adamw_with_its_gradients_clipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, precision: str
) -> None:
    """Lightning refuses to clip for a fused optimizer under mixed precision; the module clips itself."""
    seen: list[tuple[bool, float, float]] = []  # (fused, norm before, norm after) at each step
    clip = TranslationModule.configure_gradient_clipping

    def watched(module, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        params = [p for group in optimizer.param_groups for p in group["params"]]
        before = torch.nn.utils.get_total_norm([p.grad for p in params]).item()
        clip(module, optimizer, gradient_clip_val, gradient_clip_algorithm)
        after = torch.nn.utils.get_total_norm([p.grad for p in params]).item()
        seen.append((optimizer.defaults["fused"], before, after))

    monkeypatch.setattr(TranslationModule, "configure_gradient_clipping", watched)
    clip_value = 0.01  # far below the gradients' norm at the start
    cfg = tiny_run(
        tmp_path / "run",
        tmp_path / "cache",
        f"trainer.precision={precision}",
        f"trainer.gradient_clip_val={clip_value}",
        "trainer.max_steps=3",
        "logger.tensorboard=false",
    )
    metrics = start_run(validated_run(cfg))
    assert len(seen) == 3
    for fused, before, after in seen:
        assert fused
        assert before > clip_value
        assert after == pytest.approx(clip_value, rel=1e-3)
    assert {"train/loss", "train/nll", "train/ppl", "train/acc"} <= metrics.keys()
    assert 0.0 <= metrics["train/acc"] <= 1.0
    assert metrics["train/ppl"] == pytest.approx(
        torch.exp(torch.tensor(metrics["train/nll"])).item(), rel=1e-5
    )
