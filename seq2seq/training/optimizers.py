"""The optimizer a run trains with and its learning-rate schedule.

The optimizer is AdamW for every parameter, or Muon for the layers' weight matrices and AdamW for
the rest (embeddings, norms, biases), stepped as one so that Lightning, the schedule and checkpoints
see a single one. The schedule is the paper's inverse square root, or warmup-stable-decay (``wsd``),
whose decay follows the share of the run's budget spent rather than a step count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from seq2seq.config import OptimConfig
from seq2seq.model import Transformer


def adamw(params: Iterable[Tensor], fused: bool, **hyperparameters: Any) -> torch.optim.AdamW:
    """AdamW with the fused kernel where asked for and available, else multi-tensor (foreach) kernels.

    On a CPU, foreach still loops over ~10 ops per tensor, while the fused kernel makes one pass per
    tensor. Same update rule; torch < 2.4 has no CPU fused kernel.
    """
    params = list(params)
    if fused:
        try:
            return torch.optim.AdamW(params, fused=True, **hyperparameters)
        except RuntimeError:  # "fused=True requires ... supported devices" before torch 2.4
            pass
    return torch.optim.AdamW(params, foreach=True, **hyperparameters)


def fused_adamw_applies(precision: str) -> bool:
    """Whether training takes the fused AdamW: on any device, unless fp16 loss scaling is on.

    With fp16 gradients are scaled, and the fused kernel would unscale them inside its step, after
    clipping; fp32 and bf16 need no scaling. On a GPU the fused kernel also keeps each parameter's
    step counter on the device, where the multi-tensor kernels read every counter back to the host
    at each step.
    """
    return not precision.startswith("16")


def configured_adamw(params: list[Tensor], fused: bool, cfg: OptimConfig) -> torch.optim.AdamW:
    """:func:`adamw` with ``optim``'s settings."""
    return adamw(params, fused, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)


def layer_matrices(model: Transformer) -> set[Tensor]:
    """The 2-D weights inside the encoder and decoder layers: what Muon orthogonalises. The
    embeddings and the output projection are lookup tables and a classifier, not such maps."""
    layers = [*model.encoder_layers, *model.decoder_layers]
    return {p for layer in layers for p in layer.parameters() if p.ndim == 2}


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon (``torch.optim.Muon``, its update scaled to AdamW's RMS, so it takes AdamW's learning
    rate and weight decay) for ``matrices``, AdamW for ``rest``. The groups are the inner
    optimizers' own, so a scheduler's change of ``lr`` reaches both."""

    def __init__(self, matrices: list[Tensor], rest: list[Tensor], fused: bool, cfg: OptimConfig) -> None:
        self.muon = torch.optim.Muon(
            matrices, lr=cfg.lr, weight_decay=cfg.weight_decay, adjust_lr_fn="match_rms_adamw"
        )
        self.adamw = configured_adamw(rest, fused, cfg)
        super().__init__([*self.muon.param_groups, *self.adamw.param_groups], {})

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
        self.param_groups = [*self.muon.param_groups, *self.adamw.param_groups]  # loading made new ones


def build_optimizer(model: Transformer, cfg: OptimConfig, fused: bool) -> torch.optim.Optimizer:
    """``optim.optimizer``'s choice over the model's parameters (a tied embedding counts once)."""
    params = list(model.parameters())
    if cfg.optimizer == "adamw":
        return configured_adamw(params, fused, cfg)
    matrices = layer_matrices(model)
    return MuonWithAdamW(
        [p for p in params if p in matrices], [p for p in params if p not in matrices], fused, cfg
    )


def inverse_sqrt_factor(step: int, warmup_steps: int) -> float:
    """The paper's schedule as a multiplier of the peak LR: linear warmup, then 1/√step decay."""
    step = step + 1
    return min(step / warmup_steps, math.sqrt(warmup_steps / step))


def wsd_factor(
    step: int, warmup_steps: int, progress: float, decay_share: float, decay_shape: str = "linear"
) -> float:
    """Warmup-stable-decay: linear warmup over ``warmup_steps``, the peak LR, then a decay to zero
    over the last ``decay_share`` of the budget (``progress`` runs from 0 to 1): linear, or
    "1-sqrt", which keeps the LR higher for longer and drops it fastest at the end."""
    warmup = min(1.0, (step + 1) / warmup_steps)
    left = min(1.0, max(0.0, (1.0 - progress) / decay_share)) if decay_share > 0 else 1.0  # 1 -> 0
    decay = left if decay_shape == "linear" else 1.0 - math.sqrt(1.0 - left)
    return warmup * decay


def lr_schedule(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig, progress: Callable[[], float]
) -> torch.optim.lr_scheduler.LambdaLR:
    """``optim.schedule`` as a multiplier of ``optim.lr``, stepped after every optimizer step.

    ``progress()`` is the share of the run's budget spent once the step in progress is done (the
    Budget callback measures it before each step), from which ``wsd`` sets the next step's LR. The
    factor is a closure, which ``LambdaLR`` leaves out of its state: a checkpoint keeps the counters.
    """

    def factor(step: int) -> float:
        if cfg.schedule == "wsd":
            return wsd_factor(step, cfg.warmup_steps, progress(), cfg.decay_share, cfg.decay_shape)
        return inverse_sqrt_factor(step, cfg.warmup_steps)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
