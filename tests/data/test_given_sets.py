"""Own dev and test sets (``data.valid_path``, ``data.test_path``), and the held-out sets carved out
of a corpus too small for the default sizes."""

from __future__ import annotations

import logging
from pathlib import Path

import datasets
import pytest

from seq2seq.config import DataConfig, DataError, validated_run
from seq2seq.data.corpus import CorpusPlan, given_sets, held_out_split, load_splits
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.split import held_out_sizes
from seq2seq.inference import cli
from seq2seq.launch.start import start_run
from tests.helpers.compose import tiny_run
from tests.helpers.tiny import CORPUS

ORDERS = CORPUS.parent / "orders.tsv"  # 400 pairs, 400 distinct sources, none of them in tiny.tsv
LINES = ORDERS.read_text(encoding="utf-8").splitlines()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def config(tmp_path: Path, **overrides: object) -> DataConfig:
    return DataConfig(
        path=str(CORPUS), vocab_size=300, num_workers=0, cache_dir=str(tmp_path / "cache"), **overrides
    )


def sources(dataset: datasets.Dataset) -> list[str]:
    return dataset["src"][:]


def test_given_sets_are_used_as_they_are_and_not_carved_out_of_the_corpus(tmp_path: Path) -> None:
    valid, test = write(tmp_path / "dev.tsv", LINES[:20]), write(tmp_path / "test.tsv", LINES[20:45])
    splits, _ = load_splits(config(tmp_path, valid_path=str(valid), test_path=str(test)))
    assert sources(splits["valid"]) == [line.split("\t")[0] for line in LINES[:20]]
    assert sources(splits["test"]) == [line.split("\t")[0] for line in LINES[20:45]]
    assert len(splits["train"]) == len(CORPUS.read_text(encoding="utf-8").splitlines())  # every pair


def test_one_held_out_split_is_read_without_the_other_ones_file(tmp_path: Path) -> None:
    """``translate.py --eval valid`` after the run's test file moved: only the split asked for is read."""
    valid, test = write(tmp_path / "dev.tsv", LINES[:20]), write(tmp_path / "test.tsv", LINES[20:45])
    given = config(tmp_path, valid_path=str(valid), test_path=str(test))
    carved = config(tmp_path, test_path=str(test), valid_size=10)
    before = {"given": load_splits(given)[0]["valid"], "carved": load_splits(carved)[0]["valid"]}
    test.rename(tmp_path / "moved.tsv")
    assert sources(held_out_split(given, "valid")) == sources(before["given"])
    assert sources(held_out_split(carved, "valid")) == sources(before["carved"])  # the same rows carved
    with pytest.raises(DataError, match="corpus file not found"):
        held_out_split(given, "test")


def test_a_given_held_out_set_is_read_without_the_corpus(tmp_path: Path) -> None:
    """``translate.py --eval valid`` of a run whose data.path has moved since."""
    corpus = write(tmp_path / "corpus.tsv", CORPUS.read_text(encoding="utf-8").splitlines())
    valid = write(tmp_path / "dev.tsv", LINES[:20])
    moved = DataConfig(path=str(corpus), valid_path=str(valid), cache_dir=str(tmp_path / "cache"))
    corpus.unlink()
    assert sources(held_out_split(moved, "valid")) == [line.split("\t")[0] for line in LINES[:20]]


def test_a_given_set_that_matches_no_file_is_named_by_its_own_key(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^data\.valid_path '.*dev-\*\.tsv' matches no file"):
        load_splits(config(tmp_path, valid_path=str(tmp_path / "dev-*.tsv")))
    assert not (tmp_path / "cache").exists()  # found missing before the corpus cache is built


def test_a_hub_corpus_takes_local_given_sets(tmp_path: Path) -> None:
    """Read as data.path would be, without the hub's name or config (no network needed)."""
    valid = write(tmp_path / "dev.tsv", LINES[:5])
    cfg = DataConfig(
        path=None,
        hub_dataset="opus_books",
        hub_config="en-es",
        valid_path=str(valid),
        cache_dir=str(tmp_path),
    )
    assert sources(given_sets(CorpusPlan.of(cfg))["valid"]) == [line.split("\t")[0] for line in LINES[:5]]


def test_a_set_not_given_is_carved_out_as_before(tmp_path: Path) -> None:
    valid = write(tmp_path / "dev.en-es.tsv", LINES[:20])
    splits, _ = load_splits(config(tmp_path, valid_path=str(valid), valid_size=10, test_size=10))
    alone, _ = load_splits(config(tmp_path, valid_size=10, test_size=10))
    assert len(set(sources(splits["test"]))) == 10 and len(splits["valid"]) == 20
    assert len(splits["train"]) + len(splits["test"]) == len(CORPUS.read_text(encoding="utf-8").splitlines())
    assert not set(sources(splits["train"])) & set(sources(splits["test"]))
    assert sources(alone["test"]) != sources(splits["test"])  # the test set takes the place valid had


def test_overlap_with_training_is_reported_and_dropped_on_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiny = CORPUS.read_text(encoding="utf-8").splitlines()
    valid = write(tmp_path / "dev.tsv", tiny[:30] + LINES[:5])  # 30 pairs that training holds too
    overlapping = [line for line in tiny if line.split("\t")[0] in {t.split("\t")[0] for t in tiny[:30]}]
    with caplog.at_level(logging.INFO, logger="seq2seq.data"):
        kept, _ = load_splits(config(tmp_path, valid_path=str(valid), test_size=10))
        dropped, _ = load_splits(
            config(tmp_path, valid_path=str(valid), test_size=10, drop_train_overlap=True)
        )
    lines = [r.getMessage() for r in caplog.records if "share their source" in r.getMessage()]
    carved = len(set(sources(kept["test"])) & {line.split("\t")[0] for line in overlapping})
    count = sum(1 for src in sources(kept["train"]) if src in set(sources(kept["valid"])))
    assert count == len(overlapping) - carved > 0
    assert lines[0].startswith(f"{count} of {len(kept['train'])} training pairs share their source sentence")
    assert lines[0].endswith("kept (data.drop_train_overlap=true drops them)") and lines[1].endswith(
        "dropped"
    )
    assert len(dropped["train"]) == len(kept["train"]) - count
    assert not set(sources(dropped["train"])) & set(sources(dropped["valid"]))


def test_a_changed_dev_file_rebuilds_its_ids_and_keeps_the_tokenizer(tmp_path: Path) -> None:
    valid = write(tmp_path / "dev.tsv", LINES[:20])
    first = TranslationDataModule(config(tmp_path, valid_path=str(valid), test_size=10))
    first.setup()
    write(valid, LINES[20:40])
    second = TranslationDataModule(config(tmp_path, valid_path=str(valid), test_size=10))
    second.setup()
    assert first.references("valid") != second.references("valid")
    assert second.references("valid")[0] == [line.split("\t")[0] for line in LINES[20:40]]
    assert first.splits["valid"]["src_ids"] != second.splits["valid"]["src_ids"]
    cache = tmp_path / "cache"
    assert len(list(cache.glob("encoded-*"))) == 2 and len(list(cache.glob("tokenizer-*"))) == 1
    assert first.tokenizer.to_dict() == second.tokenizer.to_dict()  # learnt from the training pairs only


def test_a_small_corpus_holds_out_a_tenth_each_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="seq2seq.data"):
        splits, _ = load_splits(DataConfig(path=str(ORDERS), cache_dir=str(tmp_path / "cache")))
    assert (len(splits["valid"]), len(splits["test"]), len(splits["train"])) == (40, 40, 320)
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("held out")] == [
        "held out 40 validation and 40 test source sentences (asked 2000 and 2000): "
        "at most 1/10 each of the corpus's distinct sources"
    ]
    assert held_out_sizes(100_904, 2000, 2000) == (2000, 2000)  # the bundled corpus's as asked
    assert held_out_sizes(5, 3, 2) == (1, 1) and held_out_sizes(400, 0, 2000) == (0, 40)


def test_a_corpus_of_two_sources_stops_in_one_line(tmp_path: Path) -> None:
    two = write(tmp_path / "two.tsv", LINES[:2])
    with pytest.raises(DataError, match=r"^corpus has 2 distinct source sentences; holding out 1 for valid"):
        load_splits(DataConfig(path=str(two), cache_dir=str(tmp_path / "cache")))
    splits, _ = load_splits(
        DataConfig(path=str(two), cache_dir=str(tmp_path / "cache"), valid_path=str(two), test_path=str(two))
    )
    assert len(splits["train"]) == 2


def test_training_validates_and_evaluates_on_the_given_sets(tmp_path: Path, capsys) -> None:
    valid, test = write(tmp_path / "dev.tsv", LINES[:12]), write(tmp_path / "test.tsv", LINES[12:20])
    run = tmp_path / "run"
    start_run(
        validated_run(
            tiny_run(
                run,
                tmp_path / "cache",
                f"data.valid_path={valid}",
                f"data.test_path={test}",
                "trainer.max_steps=3",
            )
        )
    )
    ckpt = run / "checkpoints" / "best.ckpt"
    for split, count in (("valid", 12), ("test", 8)):
        assert cli.main(["--ckpt", str(ckpt), "--eval", split]) == 0
        assert f"sentences = {count}\n" in capsys.readouterr().out
    test.rename(tmp_path / "moved.tsv")  # only the split asked for is read
    assert cli.main(["--ckpt", str(ckpt), "--eval", "valid"]) == 0
    assert "sentences = 12\n" in capsys.readouterr().out
