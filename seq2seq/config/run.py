"""One training run's config: :class:`RunConfig` over the groups, registered in Hydra's ConfigStore;
the range rules of the trainer group, which has no dataclass (its keys are
``pytorch_lightning.Trainer`` arguments, with the project's choices in
``configs/trainer/default.yaml``); the run's validation with the rules across groups
(:func:`validated_run`); and its keys flattened (:func:`dotted`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from seq2seq.config.data import DataConfig
from seq2seq.config.decode import SAMPLING_KEYS, DecodeConfig
from seq2seq.config.errors import ConfigError
from seq2seq.config.model import ModelConfig
from seq2seq.config.training import CallbacksConfig, LoggerConfig, OptimConfig


@dataclass
class RunConfig:
    """Everything one training run is configured by: a group per field, then the run's own keys."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    trainer: dict[str, Any] = field(default_factory=dict)  # pytorch_lightning.Trainer arguments
    callbacks: CallbacksConfig = field(default_factory=CallbacksConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    seed: int = 42  # seeds python, numpy, torch and the batch sampler
    output_dir: str | None = None  # config, tokenizer, checkpoints, tensorboard/; None: Hydra's run dir
    ckpt_path: str | None = None  # resume from this checkpoint (e.g. <run>/checkpoints/last.ckpt)
    init_from: str | None = None  # start from this checkpoint's weights and tokenizer, all else new
    overwrite_output_dir: bool = False  # train into a directory an earlier run trained in, over its files
    compile: bool = False  # torch.compile the layers; with data.static_shapes the step, CUDA graphs on a GPU
    skip_nonfinite: bool = False  # skip batches with NaN/inf loss instead of stopping

    def __post_init__(self) -> None:
        _check_trainer(self.trainer)


DURATION = re.compile(r"\d+:\d\d:\d\d:\d\d")  # Lightning's max_time string: DD:HH:MM:SS


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _share_or_count(key: str, value: Any, least: int) -> None:
    """A Lightning limit or interval: a share of an epoch in (0, 1], or a count of batches >= ``least``."""
    if value is None or (_whole(value) and value >= least):
        return
    if not (isinstance(value, float) and 0.0 < value <= 1.0):
        raise ConfigError(
            f"trainer.{key} must be a share of an epoch in (0, 1] or a number of batches >= {least}, "
            f"got {value}"
        )


def _check_trainer(trainer: dict[str, Any]) -> None:
    """The range rules of the Trainer arguments the configs set. Lightning checks some only once a
    run directory exists, and some not at all (a negative clip value flips the gradients)."""
    for limit in ("max_epochs", "max_steps"):  # 0 would end with no checkpoint
        value = trainer.get(limit)
        if value is not None and not (_whole(value) and (value >= 1 or value == -1)):
            raise ConfigError(f"trainer.{limit} must be >= 1, or -1 for no limit, got {value}")
    max_time = trainer.get("max_time")
    if max_time is not None and not (isinstance(max_time, str) and DURATION.fullmatch(max_time.strip())):
        raise ConfigError(f"trainer.max_time must be DD:HH:MM:SS (00:01:00:00 is an hour), got {max_time!r}")
    if max_time is not None and not any(int(part) for part in max_time.split(":")):
        raise ConfigError(f"trainer.max_time must be longer than 0, got {max_time!r}")
    clip = trainer.get("gradient_clip_val")
    if clip is not None and not (_number(clip) and clip >= 0):
        raise ConfigError(f"trainer.gradient_clip_val must be a number >= 0 (0 = off), got {clip}")
    for key, least in (("accumulate_grad_batches", 1), ("log_every_n_steps", 1)):
        value = trainer.get(key, least)
        if not (_whole(value) and value >= least):
            raise ConfigError(f"trainer.{key} must be a whole number >= {least}, got {value}")
    every = trainer.get("check_val_every_n_epoch")
    if every is not None and not (_whole(every) and every >= 1):
        raise ConfigError(f"trainer.check_val_every_n_epoch must be >= 1 or null, got {every}")
    sanity = trainer.get("num_sanity_val_steps", 0)
    if not (_whole(sanity) and sanity >= -1):
        raise ConfigError(f"trainer.num_sanity_val_steps must be >= 0, or -1 for all, got {sanity}")
    interval = trainer.get("val_check_interval")
    if not (isinstance(interval, str) and DURATION.fullmatch(interval.strip())):
        _share_or_count("val_check_interval", interval, 1)
    _share_or_count("limit_train_batches", trainer.get("limit_train_batches"), 1)
    _share_or_count("limit_val_batches", trainer.get("limit_val_batches"), 0)


RUN_SCHEMA = "run_schema"  # RunConfig's name in Hydra's ConfigStore: the first entry of train.yaml's defaults
ConfigStore.instance().store(name=RUN_SCHEMA, node=RunConfig)


def dotted(cfg: DictConfig, prefix: str = "") -> dict[str, Any]:
    """The values a config sets, by dotted key (``{"optim.lr": 0.0015, ...}``); nodes are walked,
    not listed. The one flattener of a config: overrides, recipes and the reference page use it."""
    found: dict[str, Any] = {}
    for key, value in cfg.items():
        if isinstance(value, DictConfig):
            found |= dotted(value, f"{prefix}{key}.")
        else:
            found[f"{prefix}{key}"] = value
    return found


def validated(schema: type, cfg: DictConfig | dict[str, Any], key: str) -> Any:
    """Build ``schema`` from one config group, failing with the offending key's name."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), cfg)
        return OmegaConf.to_object(merged)
    except ConfigError:
        raise
    except Exception as err:  # OmegaConf raises several types; all mean "bad value/key"
        raise ConfigError(f"{key}: {err}".splitlines()[0]) from err


def validated_run(cfg: DictConfig) -> RunConfig:
    """The composed run config as schema objects, with every group's rules and the rules across
    groups checked; a failure names the key in one line."""
    hints = get_type_hints(RunConfig)
    plain = OmegaConf.to_container(cfg, resolve=True)
    run = RunConfig(
        **{
            spec.name: validated(hints[spec.name], cfg[spec.name], spec.name)
            if is_dataclass(hints[spec.name])
            else plain[spec.name]
            for spec in fields(RunConfig)
        }
    )
    if run.decode.sampling:
        raise ConfigError(
            "decode.sampling=true would make val/bleu random; validation decodes deterministically "
            "(sample at translate time: translate.py --sample)"
        )
    if run.decode.capture:  # validation's model changes between validations: each would compile again
        raise ConfigError(
            "decode.capture=true is for translating (translate.py --capture); validation decodes eagerly"
        )
    unset = DecodeConfig()
    ignored = [f"decode.{key}" for key in SAMPLING_KEYS if getattr(run.decode, key) != getattr(unset, key)]
    if ignored:
        raise ConfigError(
            f"{', '.join(ignored)} shape sampling, which validation never does: they would be "
            "ignored (sample at translate time: translate.py --sample)"
        )
    if run.model.tie_embeddings and not run.data.shared_vocab:
        raise ConfigError(
            "model.tie_embeddings=true shares one embedding matrix between source and target, but "
            "data.shared_vocab=false gives each its own vocabulary: set model.tie_embeddings=false"
        )
    if run.data.max_length + 2 > run.model.max_positions:
        raise ConfigError(
            f"data.max_length ({run.data.max_length}) + 2 exceeds "
            f"model.max_positions ({run.model.max_positions})"
        )
    return run
