"""The optimizer a run trains with: AdamW for every parameter, or Muon for the layers' weight
matrices and AdamW for the rest (embeddings, norms, biases), stepped as one optimizer so that
Lightning, the learning-rate schedule and checkpoints see a single one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from seq2seq.config import OptimConfig
from seq2seq.model import Transformer


def adamw(params: Iterable[Tensor], fused: bool, **hyperparameters: Any) -> torch.optim.AdamW:
    """AdamW with the fused kernel where asked for and available, else multi-tensor (foreach) kernels.

    On a CPU, foreach still loops over ~10 ops per tensor, while the fused kernel makes one pass
    per tensor: much cheaper (``bench/train_step.py``, docs/performance.md). Same update rule;
    torch < 2.4 has no CPU fused kernel.
    """
    params = list(params)
    if fused:
        try:
            return torch.optim.AdamW(params, fused=True, **hyperparameters)
        except RuntimeError:  # "fused=True requires ... supported devices" before torch 2.4
            pass
    return torch.optim.AdamW(params, foreach=True, **hyperparameters)


def fused_adamw_applies(device_type: str, precision: str) -> bool:
    """Whether training takes the fused AdamW: on a CPU, unless fp16 loss scaling is on.

    With fp16 gradients are scaled, and the fused kernel would unscale them inside its step, after
    clipping; fp32 and bf16 need no scaling. (On a GPU the multi-tensor kernels stay, as before.)
    """
    return device_type == "cpu" and not precision.startswith("16")


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
        self.adamw = adamw(
            rest, fused, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay
        )
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
        return adamw(
            params, fused, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay
        )
    matrices = layer_matrices(model)
    return MuonWithAdamW(
        [p for p in params if p in matrices], [p for p in params if p not in matrices], fused, cfg
    )
