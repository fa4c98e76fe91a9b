"""``python -m seq2seq.data.streamed.build [overrides]``: the sharded store of ``data.streaming``, built once
before the runs that train on it.

It takes the overrides ``train.py`` takes and builds what training with ``data.streaming=true``
would: the corpus cache, the split (:mod:`seq2seq.data.streamed.split`), the tokenizer, the held-out
splits' ids and one shard of ids per ``data.shard_pairs`` training pairs
(:mod:`seq2seq.data.streamed.shards`). Each is a cache under ``data.cache_dir`` built by one process under its
own lock; every process starts at its own shard, so the ranks of a run, or build commands started on several
machines that share the cache directory, encode the shards between them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import astuple, dataclass
from functools import partial
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
from datasets.table import MemoryMappedTable

from seq2seq.command_line import help_asked
from seq2seq.config import ConfigError, DataConfig, DataError
from seq2seq.data import corpus, encoded
from seq2seq.data.cache import build_once, digest, held_elsewhere
from seq2seq.data.corpus import CorpusPlan, HubDataset
from seq2seq.data.inspect import data_config
from seq2seq.data.readers import malformed
from seq2seq.data.streamed.shards import Store, id_lists, id_type, write_manifest, write_shard
from seq2seq.data.streamed.split import (
    SAMPLE_FILE,
    SPLIT_FILE,
    SplitSettings,
    held_out_file,
    read_batches,
    text_shard,
    write_split,
)
from seq2seq.data.tokenizers.given import read_given
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer, config_key

log = logging.getLogger("seq2seq.data")

_STORE_VERSION = 4  # bump when the store's layout changes
BLOCK_ROWS = 4096  # pairs per block: what the sampler permutes and a loader reads at once
HELD_OUT = ("valid", "test")


@dataclass(frozen=True)
class StreamedData:
    """A built store and what training needs beside it."""

    store: Store
    tokenizer: TranslationTokenizer  # what encoded the store: given, or learnt from the split
    held_out_ids: Path  # ``<split>.arrow`` of :mod:`seq2seq.data.encoded` for valid and test
    held_out_text: Path  # ``<split>.arrow``: their text, as the corpus cache holds it
    corpus_stats: dict

    def held_out(self) -> datasets.DatasetDict:
        """The text of the valid and test splits, memory-mapped (they are small)."""
        return _held_out_texts(self.held_out_text)


def _held_out_texts(directory: Path) -> datasets.DatasetDict:
    return datasets.DatasetDict(
        {
            name: datasets.Dataset(
                MemoryMappedTable.from_file(str(directory / held_out_file(name))),
                fingerprint=digest(f"{directory}|{name}"),
            )
            for name in HELD_OUT
        }
    )


def _encode_held_out(split_dir: Path, tokenizer: TranslationTokenizer, directory: Path) -> None:
    """The held-out splits' ids, their text opened only when the cache is built."""
    encoded.encode_splits(_held_out_texts(split_dir), tokenizer, directory)


def _texts(path: Path, column: str) -> Iterator[str]:
    for batch in read_batches(path):
        yield from batch.column(column).to_pylist()


def _train_tokenizer(split_dir: Path, vocab_size: int, shared: bool, directory: Path) -> None:
    """BPE learnt from the sample of the train split that the in-memory path learns from."""
    sample = split_dir / SAMPLE_FILE
    log.info("training a %d-token BPE tokenizer on a sample of the train split", vocab_size)
    tokenizer = TranslationTokenizer.train(_texts(sample, "src"), _texts(sample, "tgt"), vocab_size, shared)
    tokenizer.save(directory)


def _shuffled_blocks(path: Path, rows: int, seed: tuple[int, int]) -> Iterator[pa.Table]:
    """The text of a train shard in a seeded random order, in tables of ``rows`` rows (the last one
    shorter). A corpus's order often follows length or source (the bundled one is sorted by
    length), and a block of consecutive pairs would then hold pairs of one kind, so the windows
    the sampler sorts would differ in kind through an epoch. The shard is memory-mapped, not read
    into the heap: its size is bounded by ``data.shard_pairs``, not by the corpus."""
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_stream(source).read_all()
        order = np.random.default_rng(seed).permutation(table.num_rows)
        for start in range(0, table.num_rows, rows):
            yield table.take(order[start : start + rows])


def _encode_shard(
    text: Path, tokenizer: TranslationTokenizer, block_rows: int, seed: tuple[int, int], directory: Path
) -> None:
    values = id_type(max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size))
    blocks = (
        (
            id_lists(tokenizer.encode_source(block.column("src").to_pylist()), values),
            id_lists(tokenizer.encode_target(block.column("tgt").to_pylist()), values),
        )
        for block in _shuffled_blocks(text, block_rows, seed)
    )
    write_shard(directory, blocks)


def _encode_shards(
    shards: list[Path],
    split_dir: Path,
    tokenizer: TranslationTokenizer,
    block_rows: int,
    split_seed: int,
    timeout: float,
) -> None:
    """Encode every missing shard: first those no other process is encoding, then wait for the rest."""

    def encode(i: int) -> None:
        seed = (split_seed, i)
        build_shard = partial(_encode_shard, split_dir / text_shard(i), tokenizer, block_rows, seed)
        build_once(shards[i], build_shard, f"token ids of shard {i + 1} of {len(shards)}", timeout)

    later = []
    for i in _turns(len(shards), *_process()):
        if held_elsewhere(shards[i]):
            later.append(i)
        else:
            encode(i)
    for i in later:
        encode(i)


def _turns(count: int, worker: int, workers: int) -> list[int]:
    """Every shard, starting at this worker's share, so that workers start on different shards."""
    first = worker * count // max(1, workers)
    return [(first + i) % count for i in range(count)]


def _process() -> tuple[int, int]:
    """This process's rank and the number of processes, as torchrun, srun or Lightning set them."""
    rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID", os.environ.get("LOCAL_RANK", "0")))
    size = os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1"))
    return int(rank), max(1, int(size))


@dataclass(frozen=True)
class StoreSettings:
    """What shapes the store beyond the corpus plan: the learnt tokenizer's ``data.vocab_size``,
    ``data.shared_vocab`` and ``data.tokenizer_max_pairs`` (its sample), and ``data.shard_pairs``."""

    vocab_size: int
    shared_vocab: bool
    sample_pairs: int
    shard_pairs: int

    @classmethod
    def of(cls, cfg: DataConfig) -> StoreSettings:
        """The store settings of ``cfg``."""
        return cls(cfg.vocab_size, cfg.shared_vocab, cfg.tokenizer_max_pairs, cfg.shard_pairs)


def split_key(settings: SplitSettings, corpus_name: str) -> str:
    """Everything that changes the streamed split: not the tokenizer, so evaluation finds it from the
    data config alone."""
    return json.dumps([_STORE_VERSION, corpus_name, list(astuple(settings))])


def store_key(
    settings: StoreSettings, split_name: str, block_rows: int, given: TranslationTokenizer | None
) -> str:
    """Everything that changes what the store holds beyond its split."""
    if given is None:
        tokens = [config_key(settings.vocab_size, settings.shared_vocab), settings.sample_pairs]
    else:
        tokens = ["given", digest(json.dumps(given.to_dict(), sort_keys=True))]
    return json.dumps([_STORE_VERSION, split_name, tokens, block_rows])


def streamed_split(plan: CorpusPlan, store: StoreSettings) -> tuple[Path, dict]:
    """The streamed split of the plan's corpus (built if missing) and the corpus's statistics."""
    if isinstance(plan.source, HubDataset):
        raise DataError("data.streaming reads a local data.path, not data.hub_dataset")
    cache, stats = corpus.corpus_cache(plan.source, plan.reading, plan.caches)
    malformed.check(stats, plan.max_malformed_share)
    valid, test = plan.sizes["valid"], plan.sizes["test"]
    settings = SplitSettings(valid, test, plan.split_seed, store.sample_pairs, store.shard_pairs)
    write = partial(write_split, corpus.pairs_file(cache), settings)
    name = f"stream-split-{digest(split_key(settings, cache.name))}"
    split_dir = plan.caches.built(name, write, "streamed split")
    corpus.report_carved(plan.sizes, json.loads((split_dir / SPLIT_FILE).read_text())["carved"])
    return split_dir, stats


def held_out_text(cfg: DataConfig) -> datasets.DatasetDict:
    """The text of the valid and test splits of a streamed run, read without holding the corpus:
    what ``translate.py --eval`` scores such a run's checkpoints on."""
    return _held_out_texts(streamed_split(CorpusPlan.of(cfg), StoreSettings.of(cfg))[0])


def build(
    cfg: DataConfig, block_rows: int = BLOCK_ROWS, tokenizer: TranslationTokenizer | None = None
) -> StreamedData:
    """Build what is missing of the store of ``cfg``, sharing the shards with other processes; open it.

    ``tokenizer`` encodes the store: a checkpoint's or ``data.tokenizer_file``'s (:func:`read_given`,
    which the caller has read), or, when None, one learnt from the split.
    """
    if tokenizer is None and cfg.tokenizer_file is not None:
        raise ValueError("build: data.tokenizer_file is set; pass its tokenizer (read_given)")
    return open_store(CorpusPlan.of(cfg), StoreSettings.of(cfg), block_rows, tokenizer)


def open_store(
    plan: CorpusPlan,
    settings: StoreSettings,
    block_rows: int = BLOCK_ROWS,
    tokenizer: TranslationTokenizer | None = None,
) -> StreamedData:
    """:func:`build` of a corpus plan and the store's own settings."""
    split_dir, stats = streamed_split(plan, settings)
    root = plan.caches.root / f"stream-{digest(store_key(settings, split_dir.name, block_rows, tokenizer))}"
    timeout = plan.caches.lock_timeout_s
    tokenizer_dir = root / "tokenizer"
    if tokenizer is None:
        learn = partial(_train_tokenizer, split_dir, settings.vocab_size, settings.shared_vocab)
        build_once(tokenizer_dir, learn, "tokenizer", timeout)
        tokenizer = TranslationTokenizer.load(tokenizer_dir)
    held_out = partial(_encode_held_out, split_dir, tokenizer)
    build_once(root / "held-out", held_out, "token ids of the held-out splits", timeout)
    shards = [
        root / f"shard-{i:05d}"
        for i in range(len(json.loads((split_dir / SPLIT_FILE).read_text())["shards"]))
    ]
    _encode_shards(shards, split_dir, tokenizer, block_rows, plan.split_seed, timeout)
    build_once(root / "manifest", partial(write_manifest, root, shards), "store manifest", timeout)
    return StreamedData(Store.open(root, root / "manifest"), tokenizer, root / "held-out", split_dir, stats)


def main(argv: list[str] | None = None) -> int:
    """Build the store; exit status 1 on bad input (one ``error:`` line)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = sys.argv[1:] if argv is None else argv
    if help_asked(args, __doc__):
        return 0
    try:
        cfg = data_config(args)
        data = build(cfg, tokenizer=read_given(cfg))
    except (ConfigError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    shards = len(data.store.shard_names)
    print(f"store ready: {data.store.rows} training pairs in {shards} shards under {data.store.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
