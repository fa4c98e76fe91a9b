"""Caches built once however many processes start at once, as every rank of a distributed run does."""

from __future__ import annotations

import fcntl
import json
import logging
import multiprocessing
import os
import signal
import time
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

import pytest

from seq2seq.config import DataConfig, DataError
from seq2seq.data.cache import build_once, file_digest
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.prepare import prepare
from tests.helpers.tiny import CORPUS

FORK = multiprocessing.get_context("fork")  # cheap separate processes: each holds its own locks
SPAWN = multiprocessing.get_context(
    "spawn"
)  # fresh interpreters, as separate ranks are (and tokenizers needs)


def _slow_build(directory: Path, log_file: Path) -> None:
    with log_file.open("a") as handle:
        handle.write("built\n")
    time.sleep(0.5)  # long enough for every other process to arrive and wait
    (directory / "payload").write_text("done")


def _race(target: Path, log_file: Path) -> bool:
    built = build_once(target, partial(_slow_build, log_file=log_file), "test cache", timeout=60)
    assert (target / "payload").read_text() == "done"  # never a half-built cache
    return built


def test_one_of_several_processes_builds_and_the_others_load(tmp_path: Path) -> None:
    target, log_file = tmp_path / "cache" / "thing-0123", tmp_path / "builds.log"
    with FORK.Pool(4) as pool:
        built = pool.starmap(_race, [(target, log_file)] * 4)
    assert sorted(built) == [False, False, False, True]
    assert log_file.read_text() == "built\n"
    assert sorted(path.name for path in target.parent.iterdir()) == [".thing-0123.lock", "thing-0123"]


def _hold_lock(lock_path: Path, held: multiprocessing.Event, release: multiprocessing.Event) -> None:
    with lock_path.open("a+b") as handle:
        fcntl.lockf(handle, fcntl.LOCK_EX)
        held.set()
        release.wait(30)


def test_a_waiter_gives_up_after_the_timeout_naming_the_lock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "thing-0123"
    lock_path = tmp_path / ".thing-0123.lock"
    held, release = FORK.Event(), FORK.Event()
    holder = FORK.Process(target=_hold_lock, args=(lock_path, held, release))
    holder.start()
    try:
        assert held.wait(30)
        with caplog.at_level(logging.INFO, logger="seq2seq.data"), pytest.raises(DataError) as error:
            build_once(target, lambda directory: None, "test cache", timeout=0.5)
    finally:
        release.set()
        holder.join(30)
    assert str(lock_path) in str(error.value) and "data.lock_timeout_s" in str(error.value)
    waiting = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert waiting == [f"waiting for {lock_path}: another process is building the test cache"]
    assert not target.exists()
    assert build_once(target, lambda directory: None, "test cache", timeout=0.5)  # a dead holder frees it


def _setup_datamodule(cfg: dict, log_file: Path) -> str:
    handler = logging.FileHandler(log_file)
    logging.getLogger("seq2seq.data").addHandler(handler)
    logging.getLogger("seq2seq.data").setLevel(logging.INFO)
    datamodule = TranslationDataModule(DataConfig(**cfg))
    datamodule.setup("fit")
    return json.dumps(datamodule.tokenizer.to_dict())


@pytest.mark.slow
def test_ranks_starting_together_build_each_cache_once_and_share_the_tokenizer(
    tiny_data_cfg: DataConfig, tmp_path: Path
) -> None:
    log_file = tmp_path / "data.log"
    with SPAWN.Pool(3) as pool:
        tokenizers = pool.starmap(_setup_datamodule, [(asdict(tiny_data_cfg), log_file)] * 3)
    assert len(set(tokenizers)) == 1
    built = [line for line in log_file.read_text().splitlines() if line.startswith("building the ")]
    assert len(built) == 4, built  # corpus, split, tokenizer, token ids: once each
    assert len({line.split(" into ")[0] for line in built}) == 4


def test_a_corpus_files_digest_is_read_once_while_the_file_is_unchanged(tmp_path: Path) -> None:
    corpus, memo = tmp_path / "corpus.tsv", tmp_path / "digests"
    corpus.write_text("a\tb\n")
    first = file_digest(corpus, memo)
    assert first == file_digest(corpus) and len(list(memo.iterdir())) == 1
    (kept,) = memo.iterdir()
    kept.write_text("kept digest")  # what a second read returns comes from the memo, not the bytes
    assert file_digest(corpus, memo) == "kept digest"
    before = corpus.stat()
    # the same size, new bytes, and a new modification time (set here, whatever the clock's grain)
    corpus.write_text("c\td\n")
    os.utime(corpus, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    assert file_digest(corpus, memo) == file_digest(corpus) != first


def _scratch(parent: Path) -> list[str]:
    return sorted(path.name for path in parent.iterdir() if path.is_dir() and path.name.startswith("."))


def test_a_build_stopped_by_ctrl_c_leaves_no_scratch_folder(tmp_path: Path) -> None:
    def interrupted(directory: Path) -> None:
        (directory / "half.json").write_text("{")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_once(tmp_path / "tokenizer-1", interrupted, "tokenizer", timeout=5)
    assert _scratch(tmp_path) == [] and not (tmp_path / "tokenizer-1").exists()


def _build_until_killed(directory: Path) -> None:
    (directory / "half.json").write_text("{")
    time.sleep(60)


def test_the_scratch_folder_of_a_killed_build_goes_with_the_next_build(tmp_path: Path) -> None:
    """SIGKILL (or a SIGTERM, or a second Ctrl-C during the clean-up) runs no clean-up at all."""
    target = tmp_path / "tokenizer-1"
    builder = FORK.Process(target=build_once, args=(target, _build_until_killed, "tokenizer", 5))
    builder.start()
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".tokenizer-1-*/build/half.json")):
        assert time.monotonic() < deadline and builder.is_alive()
        time.sleep(0.02)
    os.kill(builder.pid, signal.SIGKILL)
    builder.join()
    assert len(_scratch(tmp_path)) == 1  # what it left
    assert build_once(target, lambda directory: (directory / "done").touch(), "tokenizer", timeout=5)
    assert _scratch(tmp_path) == [] and (target / "done").is_file()


def _cache_names(cfg: DataConfig) -> list[str]:
    prepare(cfg, None)
    return sorted(p.name for p in Path(cfg.cache_dir).iterdir() if p.is_dir() and p.name != "digests")


def test_cache_names_of_the_tiny_corpus_stay_as_they_were(tiny_data_cfg: DataConfig, tmp_path: Path) -> None:
    """Every cache is named by a digest of its inputs: a name that changed with the code, not the
    inputs, would make every user re-build every cache."""
    dev = tmp_path / "dev.tsv"
    dev.write_text(
        "".join(CORPUS.read_text(encoding="utf-8").splitlines(keepends=True)[:20]), encoding="utf-8"
    )
    corpus = "corpus-04b835c41e383d90"
    assert _cache_names(tiny_data_cfg) == [
        corpus, "encoded-cb430b7630023697", "split-ed41371f60e5815c", "tokenizer-0a2d68bdf77d8d5c"
    ]  # fmt: skip
    given = replace(
        tiny_data_cfg, cache_dir=str(tmp_path / "given"), valid_path=str(dev), drop_train_overlap=True
    )
    assert _cache_names(given) == [
        corpus, "corpus-aad96e780e2e15e7", "encoded-afc5af32b3044cbb", "split-6f4e71605c2cd28d",
        "tokenizer-fa50a53645317621",
    ]  # fmt: skip
    streamed = replace(tiny_data_cfg, cache_dir=str(tmp_path / "streamed"), streaming=True, shard_pairs=100)
    assert _cache_names(streamed) == [corpus, "stream-185fce55d84f0451", "stream-split-7edf53ea4c5aed4b"]
