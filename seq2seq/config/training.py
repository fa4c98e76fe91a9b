"""The schemas of the groups only training reads: the optimiser and its schedule (optim), what runs
alongside the model (callbacks), and where metrics go (logger)."""

from __future__ import annotations

from dataclasses import dataclass, field

from seq2seq.config.errors import ConfigError, finite, positive, probability

SCHEDULES = ("inverse_sqrt", "wsd")
DECAY_SHAPES = ("linear", "1-sqrt")
OPTIMIZERS = ("adamw", "muon")


@dataclass
class OptimConfig:
    """AdamW with linear warmup, then the paper's inverse-square-root decay or a decay to zero that
    ends with the run's budget; dropout only in runs long enough to need it (training/budget.py)."""

    lr: float = 1e-3  # peak learning rate, reached at the end of warmup
    warmup_steps: int = 1000  # linear warmup length in optimiser steps
    schedule: str = "inverse_sqrt"  # or "wsd": warmup, stable, then linear decay to zero at the budget's end
    decay_share: float = 0.4  # wsd: the last share of the budget (steps or max_time) over which the LR decays
    decay_shape: str = "linear"  # wsd: the decay's shape, "linear" or "1-sqrt" (1 - sqrt of the decay done)
    optimizer: str = "adamw"  # or "muon": Muon for the layers' weight matrices, AdamW for the rest
    dropout_min_epochs: float = 0.0  # model.dropout only if the run will see this many epochs; 0 = always
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])  # AdamW's moment decay rates
    eps: float = 1e-9  # AdamW's denominator term
    weight_decay: float = 0.0  # AdamW's decoupled weight decay; 0 = off
    label_smoothing: float = 0.1  # probability spread over the other tokens in the training loss
    ema_decay: float = 0.0  # evaluate and ship an exponential moving average of the weights; 0 = off

    def __post_init__(self) -> None:
        finite("optim", self)
        positive("optim.lr", self.lr)
        positive("optim.warmup_steps", self.warmup_steps)
        for name, choices in (
            ("schedule", SCHEDULES),
            ("decay_shape", DECAY_SHAPES),
            ("optimizer", OPTIMIZERS),
        ):
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"optim.{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}"
                )
        probability("optim.decay_share", self.decay_share)
        if self.decay_shape != "linear" and self.schedule != "wsd":
            raise ConfigError(
                f"optim.decay_shape={self.decay_shape} shapes the wsd schedule's decay: "
                f"set optim.schedule=wsd (this run has {self.schedule})"
            )
        if self.dropout_min_epochs < 0:
            raise ConfigError(f"optim.dropout_min_epochs must be >= 0, got {self.dropout_min_epochs}")
        probability("optim.label_smoothing", self.label_smoothing)
        probability("optim.ema_decay", self.ema_decay)
        positive("optim.eps", self.eps)
        if self.weight_decay < 0:
            raise ConfigError(f"optim.weight_decay must be >= 0, got {self.weight_decay}")
        if len(self.betas) != 2:
            raise ConfigError(f"optim.betas must be two numbers, got {list(self.betas)}")
        for beta in self.betas:
            probability("optim.betas", beta)


@dataclass
class CallbacksConfig:
    """What runs alongside training besides the model: checkpoints, early stopping, progress."""

    checkpoint_every_n_steps: int = 500  # also refresh last.ckpt this often (kill -9 recovery); 0 = off
    early_stopping_patience: int = 5  # validations without a better val/bleu before stopping; 0 = off
    min_steps_between_validations: int = 100  # closer validations (a short epoch) are spread to this; 0 = off
    keep_last: int = 0  # also keep the last N validations' weights, step-<step>.ckpt, to average; 0 = off
    progress_bar: bool = True  # rich progress bar with tokens/s and validation scores
    progress_every_n_steps: int = 500  # a plain progress line in the log this often; 0 = off
    progress_every_s: float = 60.0  # ...or after this many seconds, whichever comes first; 0 = off

    def __post_init__(self) -> None:
        finite("callbacks", self)
        for name in (
            "checkpoint_every_n_steps",
            "early_stopping_patience",
            "min_steps_between_validations",
            "keep_last",
            "progress_every_n_steps",
            "progress_every_s",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"callbacks.{name} must be >= 0, got {getattr(self, name)}")


@dataclass
class LoggerConfig:
    """Where metrics and panels go."""

    tensorboard: bool = True  # scalars, text, attention images and hparams under <run>/tensorboard
    samples: int = 4  # validation translations shown in the val/samples text panel
    attention_images: bool = True  # heatmaps of one validation sentence's attention at each validation

    def __post_init__(self) -> None:
        if self.samples < 0:
            raise ConfigError(f"logger.samples must be >= 0, got {self.samples}")
