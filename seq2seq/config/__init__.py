"""Typed schemas of every config group, and the one owner of their defaults.

``configs/train.yaml`` composes onto :class:`RunConfig` (registered in Hydra's ConfigStore as
``run_schema``), so every key exists in the composed config with its default in the group's schema
here, and a YAML file in ``configs/`` holds only the values in which its option differs from these
defaults (tests/test_config.py fails on a YAML value that repeats one). A typo or a value of the
wrong type fails at compose time with the key's name; range rules live in each group's
``__post_init__``, and the rules across groups in :func:`validated_run`. The trainer group has no
dataclass: its keys are ``pytorch_lightning.Trainer`` arguments, with the project's choices in
``configs/trainer/default.yaml`` and their range rules in :mod:`seq2seq.config.run`.

A module per job: :mod:`.errors` (the errors and shared range checks), :mod:`.model` (with the
special ids), :mod:`.data`, :mod:`.decode`, :mod:`.training` (optim, callbacks, logger)
and :mod:`.run` (the whole run, with the trainer group's rules). Code imports these names from here.
"""

from seq2seq.config.data import BPE, HUGGING_FACE, SENTENCEPIECE, DataConfig
from seq2seq.config.decode import DecodeConfig
from seq2seq.config.errors import ConfigError, DataError
from seq2seq.config.model import ACTIVATIONS, GELU, RELU, SPECIAL_IDS, SWIGLU, ModelConfig, SpecialIds
from seq2seq.config.run import RUN_SCHEMA, RunConfig, dotted, validated, validated_run
from seq2seq.config.training import CallbacksConfig, OptimConfig

__all__ = [
    "ACTIVATIONS",
    "BPE",
    "GELU",
    "HUGGING_FACE",
    "RELU",
    "RUN_SCHEMA",
    "SENTENCEPIECE",
    "SPECIAL_IDS",
    "SWIGLU",
    "CallbacksConfig",
    "ConfigError",
    "DataConfig",
    "DataError",
    "DecodeConfig",
    "ModelConfig",
    "OptimConfig",
    "RunConfig",
    "SpecialIds",
    "dotted",
    "validated",
    "validated_run",
]
