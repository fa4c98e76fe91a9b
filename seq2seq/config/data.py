"""The data group's schema: where the parallel corpus comes from, how it is tokenized, and how it
becomes batches, with the rules that tie these keys together."""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from seq2seq.config.errors import ConfigError, finite, positive

BPE, HUGGING_FACE, SENTENCEPIECE = "bpe", "huggingface", "sentencepiece"  # data.tokenizer's values
TOKENIZERS = (BPE, HUGGING_FACE, SENTENCEPIECE)


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
        finite("data", self)
        for name in ("vocab_size", "max_length", "max_tokens", "eval_max_tokens", "tokenizer_max_pairs"):
            positive(f"data.{name}", getattr(self, name))
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
        positive("data.lock_timeout_s", self.lock_timeout_s)
        positive("data.shard_pairs", self.shard_pairs)
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
