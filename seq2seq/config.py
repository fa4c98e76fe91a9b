"""Typed schemas of every config group, and the one owner of their defaults.

``configs/train.yaml`` composes onto :class:`RunConfig` (registered in Hydra's ConfigStore as
``run_schema``), so every key below exists in the composed config with its default here, and a
YAML file in ``configs/`` holds only the values in which its option differs from these defaults
(tests/test_config.py fails on a YAML value that repeats one). A typo or a value of the wrong
type fails at compose time with the key's name; range rules live in each group's
``__post_init__``, and the rules across groups in :func:`validated_run`. The trainer group has
no dataclass: its keys are ``pytorch_lightning.Trainer`` arguments, with the project's choices in
``configs/trainer/default.yaml`` and their range rules in ``RunConfig.__post_init__``.
"""

from __future__ import annotations

import codecs
import math
import re
from dataclasses import dataclass, field, fields, is_dataclass
from itertools import pairwise
from typing import Any, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key."""


class DataError(ValueError):
    """The corpus or an evaluation set cannot be used; the message says which file and why."""


def _finite(group: str, schema: Any) -> None:
    """NaN passes every range check written with < and >, and inf most: each group refuses both first."""
    for spec in fields(schema):
        value = getattr(schema, spec.name)
        numbers = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(number, float) and not math.isfinite(number) for number in numbers):
            raise ConfigError(f"{group}.{spec.name} must be a finite number, got {value}")


def _positive(name: str, value: int | float) -> None:
    if value <= 0:
        raise ConfigError(f"{name} must be > 0, got {value}")


def _probability(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{name} must be in [0, 1), got {value}")


@dataclass(frozen=True)
class SpecialIds:
    """Ids of the special tokens. The tokenizer gives its special tokens these ids; the model and
    decoding read them from the model, so decoding never needs the data stage."""

    pad: int = 0
    bos: int = 1
    eos: int = 2
    unk: int = 3


SPECIAL_IDS = SpecialIds()
BPE, HUGGING_FACE, SENTENCEPIECE = "bpe", "huggingface", "sentencepiece"  # data.tokenizer's values
TOKENIZERS = (BPE, HUGGING_FACE, SENTENCEPIECE)
RELU, GELU, SWIGLU = "relu", "gelu", "swiglu"  # model.activation: the position-wise FFN's (model/layers.py)
ACTIVATIONS = {RELU: "ReLU", GELU: "GELU", SWIGLU: "SwiGLU"}  # each value, as prose writes it


@dataclass
class ModelConfig:
    """Sizes and switches of the encoder-decoder Transformer."""

    d_model: int = 256  # width of every residual stream
    n_heads: int = 4  # attention heads; d_model must be divisible by it
    n_encoder_layers: int = 3  # encoder depth
    n_decoder_layers: int = 3  # decoder depth
    d_ff: int = 1024  # hidden width of the position-wise feed-forward
    activation: str = RELU  # FFN: "relu", "gelu" (exact erf) or "swiglu" (gated; d_ff as given)
    dropout: float = 0.1  # dropout on embeddings, sublayer outputs and FFN hidden
    attention_dropout: float = 0.0  # dropout on attention weights
    max_positions: int = 256  # longest sequence the positional encoding covers
    learned_positions: bool = False  # learned instead of sinusoidal positions
    norm_first: bool = False  # pre-norm; False is the paper's post-norm
    qk_norm: bool = False  # RMS-normalise each head's queries and keys before the scores
    tie_embeddings: bool = True  # share src/tgt embeddings and the output projection

    def __post_init__(self) -> None:
        _finite("model", self)
        for name in ("d_model", "n_heads", "n_encoder_layers", "n_decoder_layers", "d_ff", "max_positions"):
            _positive(f"model.{name}", getattr(self, name))
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
            )
        _probability("model.dropout", self.dropout)
        _probability("model.attention_dropout", self.attention_dropout)
        if self.activation not in ACTIVATIONS:
            raise ConfigError(
                f"model.activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}"
            )


@dataclass
class DataConfig:
    """Where the parallel corpus comes from and how it becomes batches."""

    path: Any = "data/spa-eng/spa.txt.gz"  # a corpus file, folder, or aligned text files (data/readers/)
    columns: list[str] = field(default_factory=lambda: ["en", "es"])  # language of each column
    direction: str = "en-es"  # "<src>-<tgt>", both named in `columns`
    hub_dataset: str | None = None  # opt-in: HF hub dataset name (needs internet)
    hub_config: str | None = None  # hub dataset config, e.g. "en-es"
    hub_split: str = "train"  # split to read of a hub dataset or of a save_to_disk DatasetDict folder
    hub_translation_field: str | None = "translation"  # field of {lang: text} where no column is a language
    valid_size: int = 2000  # source sentences held out for validation; at most a tenth of the corpus's
    test_size: int = 2000  # source sentences held out for testing; at most a tenth of the corpus's
    valid_path: Any = None  # your own validation set, in any format data.path takes; null: carved out of it
    test_path: Any = None  # your own test set, in any format data.path takes; null: carved out of it
    drop_train_overlap: bool = False  # drop training pairs whose source is in data.valid_path or test_path
    split_seed: int = 1234  # seed of the grouped train/valid/test split
    max_length: int = 64  # longest side of a pair, in tokens; longer pairs follow `too_long`
    too_long: str = "drop"  # pairs over max_length: "drop" them, or "truncate" both sides to it
    tokenizer: str = BPE  # "bpe": learnt from the train split; "huggingface" or "sentencepiece": a given file
    tokenizer_file: Any = (
        None  # the given tokenizer's file, or [source file, target file] with shared_vocab=false
    )
    vocab_size: int = 8000  # subword vocabulary size of the learnt BPE (per side when not shared)
    shared_vocab: bool = True  # one tokenizer for both languages
    tokenizer_max_pairs: int = 1_000_000  # BPE learns from at most this many training pairs, evenly spread
    max_tokens: int = 4096  # token budget of one training batch (padded tokens)
    static_shapes: bool = False  # training batches in a few fixed shapes: compile=true then captures the step
    shape_rungs: list[int] | None = None  # static_shapes: rungs under max_length + 1; null: 1.125x apart
    eval_max_tokens: int = 4096  # token budget of evaluation batches (loss and decoding) and of translate.py
    num_workers: int = 1  # worker processes of the training loader; evaluation loads in the process
    cache_dir: str = "~/.cache/seq2seq"  # cleaned corpus, split, tokenizers and encodings
    lock_timeout_s: float = 3600.0  # how long a process waits for another one building a cache
    streaming: bool = False  # train from a sharded id store read block by block: corpora larger than memory
    shard_pairs: int = 1_000_000  # streaming: training pairs per shard, each encoded under its own lock
    encoding: str = "utf-8"  # text encoding of a local TSV, CSV, JSONL or aligned text file
    header: bool | None = None  # TSV/CSV: the first line names the columns: true, false, null = detect
    max_malformed_share: float = 0.01  # stop before training when more of the corpus is malformed
    license: str | None = None  # the corpus's licence as the Hugging Face Hub names it, e.g. cc-by-2.0
    attribution: str | None = None  # where the corpus comes from and whom to credit; the model card quotes it

    def __post_init__(self) -> None:
        _finite("data", self)
        for name in ("vocab_size", "max_length", "max_tokens", "eval_max_tokens", "tokenizer_max_pairs"):
            _positive(f"data.{name}", getattr(self, name))
        for name in ("valid_size", "test_size", "num_workers"):
            if getattr(self, name) < 0:
                raise ConfigError(f"data.{name} must be >= 0, got {getattr(self, name)}")
        if self.path is None and self.hub_dataset is None:
            raise ConfigError("data.path or data.hub_dataset must be set")
        self._check_source()
        self._check_given_sets()
        self._check_tokenizer()
        if self.too_long not in ("drop", "truncate"):
            raise ConfigError(f"data.too_long must be 'drop' or 'truncate', got {self.too_long!r}")
        _positive("data.lock_timeout_s", self.lock_timeout_s)
        _positive("data.shard_pairs", self.shard_pairs)
        parts = self.direction.split("-")
        if len(parts) != 2 or parts[0] == parts[1]:
            raise ConfigError(f"data.direction must look like 'en-es', got {self.direction!r}")
        missing = [lang for lang in parts if lang not in self.columns]
        if missing:
            raise ConfigError(
                f"data.direction {self.direction!r} names {missing[0]!r}, "
                f"not in data.columns {list(self.columns)}"
            )
        if self.max_tokens < self.max_length + 2:
            raise ConfigError(
                f"data.max_tokens ({self.max_tokens}) is smaller than the longest allowed "
                f"sentence (data.max_length + 2 = {self.max_length + 2})"
            )

        self._check_rungs()

    def _check_rungs(self) -> None:
        """Static shapes' rungs climb, and each fits a pair (BOS/EOS) within the longest allowed one."""
        rungs = list(self.shape_rungs or [])
        if any(low >= high for low, high in pairwise(rungs)) or any(
            not 2 <= rung <= self.max_length + 1 for rung in rungs
        ):
            raise ConfigError(
                f"data.shape_rungs must climb from 2 to at most data.max_length + 1 = {self.max_length + 1}, "
                f"got {rungs}"
            )

    def _check_source(self) -> None:
        """``path`` and the given sets are each one path (a glob allowed) or a list of paths; a hub
        config belongs to a hub dataset; an encoding Python knows."""
        for name in ("path", "valid_path", "test_path"):
            value = getattr(self, name)
            paths = value if isinstance(value, list | tuple) else [value]
            if value is not None and (not paths or not all(isinstance(p, str) and p for p in paths)):
                raise ConfigError(f"data.{name} must be a path or a list of paths, got {value!r}")
        if self.hub_config is not None and self.hub_dataset is None:
            raise ConfigError("data.hub_config is read only with data.hub_dataset=NAME")
        try:
            codecs.lookup(self.encoding)
        except LookupError as err:
            raise ConfigError(f"data.encoding: unknown encoding {self.encoding!r}") from err
        if not 0.0 <= self.max_malformed_share <= 1.0:
            raise ConfigError(f"data.max_malformed_share must be in [0, 1], got {self.max_malformed_share}")

    def _check_given_sets(self) -> None:
        """A key that means something only with own dev/test sets is refused without them, and the sets
        without the in-memory path that reads them."""
        given = self.valid_path is not None or self.test_path is not None
        if self.drop_train_overlap and not given:
            raise ConfigError(
                "data.drop_train_overlap=true needs data.valid_path or data.test_path: "
                "sets carved out of data.path never overlap the training pairs"
            )
        if given and self.streaming:
            raise ConfigError(
                "data.streaming=true holds its valid and test sets out of data.path: "
                "data.valid_path and data.test_path need data.streaming=false"
            )

    def _check_tokenizer(self) -> None:
        """A learnt BPE takes no file; a given tokenizer takes one file, or one per side when not shared."""
        if self.tokenizer not in TOKENIZERS:
            raise ConfigError(
                f"data.tokenizer must be one of {', '.join(TOKENIZERS)}, got {self.tokenizer!r}"
            )
        files = self.tokenizer_file
        if self.tokenizer == BPE:
            if files is not None:
                raise ConfigError(
                    "data.tokenizer_file is read only for a given tokenizer: "
                    "set data.tokenizer=huggingface or data.tokenizer=sentencepiece"
                )
            return
        if self.shared_vocab and not (isinstance(files, str) and files):
            raise ConfigError(
                f"data.tokenizer={self.tokenizer} needs data.tokenizer_file=PATH, got {files!r}"
            )
        if not self.shared_vocab and not (
            isinstance(files, list | tuple)
            and len(files) == 2
            and all(isinstance(f, str) and f for f in files)
        ):
            raise ConfigError(
                "data.shared_vocab=false needs one tokenizer file per side: "
                f"data.tokenizer_file=[SOURCE_FILE,TARGET_FILE], got {files!r}"
            )

    @property
    def source_lang(self) -> str:
        return self.direction.split("-")[0]

    @property
    def target_lang(self) -> str:
        return self.direction.split("-")[1]


@dataclass
class DecodeConfig:
    """How translations are searched for."""

    beam_size: int = 1  # 1 = greedy
    length_penalty: float = 0.6  # GNMT alpha; 0 = raw log-probability
    nbest: int = 1  # hypotheses returned per sentence
    max_len_a: float = 1.5  # max output length = a * source length + b
    max_len_b: int = 10  # the b of max_len_a: tokens allowed beyond a * source length
    min_len: int = 0  # EOS is forbidden before this many tokens
    sampling: bool = False  # greedy only: draw each token from the softmax instead of taking the argmax
    temperature: float = 1.0  # sampling: softmax temperature (< 1 sharper, > 1 flatter)
    top_k: int = 0  # sampling: draw among the k likeliest tokens; 0 = the whole vocabulary
    top_p: float = 1.0  # sampling: draw from the likeliest tokens holding this much probability; 1 = all
    capture: bool = False  # the decoder step compiled at fixed shapes (CUDA graphs on a GPU)

    def __post_init__(self) -> None:
        _finite("decode", self)
        _positive("decode.beam_size", self.beam_size)
        _positive("decode.nbest", self.nbest)
        _positive("decode.temperature", self.temperature)
        for name in ("max_len_a", "max_len_b", "min_len", "top_k"):
            if getattr(self, name) < 0:
                raise ConfigError(f"decode.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"decode.top_p must be in (0, 1], got {self.top_p}")
        if self.sampling and self.beam_size > 1:
            raise ConfigError(f"decode.sampling needs decode.beam_size=1, got {self.beam_size}")
        if self.nbest > self.beam_size:
            raise ConfigError(
                f"decode.nbest ({self.nbest}) must be <= beam ({self.beam_size}): "
                "the n-best list comes from the beam (decode.beam_size)"
            )
        if self.length_penalty < 0:
            raise ConfigError(f"decode.length_penalty must be >= 0, got {self.length_penalty}")


SAMPLING_KEYS = ("temperature", "top_k", "top_p")  # read only when sampling; their defaults change nothing
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
        _finite("optim", self)
        _positive("optim.lr", self.lr)
        _positive("optim.warmup_steps", self.warmup_steps)
        for name, choices in (
            ("schedule", SCHEDULES),
            ("decay_shape", DECAY_SHAPES),
            ("optimizer", OPTIMIZERS),
        ):
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"optim.{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}"
                )
        _probability("optim.decay_share", self.decay_share)
        if self.decay_shape != "linear" and self.schedule != "wsd":
            raise ConfigError(
                f"optim.decay_shape={self.decay_shape} shapes the wsd schedule's decay: "
                f"set optim.schedule=wsd (this run has {self.schedule})"
            )
        if self.dropout_min_epochs < 0:
            raise ConfigError(f"optim.dropout_min_epochs must be >= 0, got {self.dropout_min_epochs}")
        _probability("optim.label_smoothing", self.label_smoothing)
        _probability("optim.ema_decay", self.ema_decay)
        _positive("optim.eps", self.eps)
        if self.weight_decay < 0:
            raise ConfigError(f"optim.weight_decay must be >= 0, got {self.weight_decay}")
        if len(self.betas) != 2:
            raise ConfigError(f"optim.betas must be two numbers, got {list(self.betas)}")
        for beta in self.betas:
            _probability("optim.betas", beta)


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
        _finite("callbacks", self)
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
