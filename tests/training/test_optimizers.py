"""``optim.optimizer``: AdamW everywhere, or Muon for the layers' weight matrices with AdamW for
the rest, seen by Lightning, the schedule and checkpoints as one optimizer; and the LR schedule."""

from __future__ import annotations

import pytest
import torch

from seq2seq.config import ModelConfig, OptimConfig
from seq2seq.model import Transformer
from seq2seq.training.optimizers import MuonWithAdamW, build_optimizer, layer_matrices, lr_schedule

MUON = OptimConfig(optimizer="muon", lr=1e-3, weight_decay=0.01)


def tiny_model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(
        ModelConfig(d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1), 40, 40
    )


def test_muon_takes_the_layer_matrices_and_adamw_everything_else_once() -> None:
    model = tiny_model()
    optimizer = build_optimizer(model, MUON, fused=True)
    assert isinstance(optimizer, MuonWithAdamW)
    muon = [p for group in optimizer.muon.param_groups for p in group["params"]]
    rest = [p for group in optimizer.adamw.param_groups for p in group["params"]]
    assert set(muon) == layer_matrices(model) and all(p.ndim == 2 for p in muon)
    assert len(muon) + len(rest) == len(list(model.parameters())) and not set(muon) & set(rest)
    assert model.generator.weight in rest and all(
        p.ndim == 1 for name, p in model.named_parameters() if "norm" in name
    )


def test_a_schedule_sets_the_learning_rate_of_both() -> None:
    optimizer = build_optimizer(tiny_model(), MUON, fused=True)
    torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    assert {g["lr"] for g in optimizer.muon.param_groups + optimizer.adamw.param_groups} == {0.5e-3}


def test_a_step_moves_every_parameter_and_the_state_round_trips() -> None:
    model = tiny_model()
    optimizer = build_optimizer(model, MUON, fused=True)
    before = [p.detach().clone() for p in model.parameters()]
    src = torch.randint(4, 40, (3, 5))
    model(src, src).sum().backward()
    optimizer.step()
    assert all(not torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    twin = build_optimizer(model, MUON, fused=True)
    twin.load_state_dict(optimizer.state_dict())
    torch.optim.lr_scheduler.LambdaLR(twin, lambda step: 0.5)  # still reaches both after loading
    assert {g["lr"] for g in twin.muon.param_groups + twin.adamw.param_groups} == {0.5e-3}
    assert torch.equal(
        twin.muon.state_dict()["state"][0]["momentum_buffer"],
        optimizer.muon.state_dict()["state"][0]["momentum_buffer"],
    )


def test_the_wsd_schedule_follows_the_budget_spent_and_checkpoints_only_its_counters() -> None:
    cfg = OptimConfig(lr=1.0, schedule="wsd", warmup_steps=1, decay_share=0.5)
    optimizer = build_optimizer(tiny_model(), cfg, fused=False)
    spent = [0.0]
    scheduler = lr_schedule(optimizer, cfg, lambda: spent[0])
    assert optimizer.param_groups[0]["lr"] == 1.0  # warmed up after one step, nothing spent
    spent[0] = 0.75  # half of the last half: the LR is halfway down
    optimizer.step()  # no gradients: nothing moves, but the order is the training loop's
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5)
    assert scheduler.state_dict()["lr_lambdas"] == [None] and "cfg" not in scheduler.state_dict()
