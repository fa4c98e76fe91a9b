"""Corpus reading, cleaning, caching and the grouped deterministic split."""

from __future__ import annotations

import logging
from pathlib import Path

import datasets
import pytest

from seq2seq.config import DataConfig, DataError
from seq2seq.data.corpus import CorpusPlan, load_corpus, load_splits, references
from seq2seq.data.readers.sources import resolve_path

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _cfg(path: Path | str, tmp_path: Path, **overrides: object) -> DataConfig:
    return DataConfig(path=str(path), cache_dir=str(tmp_path / "cache"), **overrides)


def test_broken_lines_are_skipped_and_counted_exactly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="seq2seq.data"):
        cfg = _cfg(FIXTURES / "broken.tsv", tmp_path, max_malformed_share=0.5)
        pairs, stats = load_corpus(CorpusPlan.of(cfg))
    counts = {cause: entry["count"] for cause, entry in stats["malformed"].items()}
    assert (stats["pairs"], stats["malformed_lines"]) == (5, 5)
    assert counts == {"wrong_columns": 2, "empty_side": 2, "undecodable": 1}
    assert {cause: entry["line"] for cause, entry in stats["malformed"].items()} == {
        "wrong_columns": 3,
        "empty_side": 4,
        "undecodable": 7,
    }
    assert pairs["src"][:] == ["Go.", "Hi.", "Run!", "I'm 19.", "Thank you."]  # BOM gone
    assert pairs["tgt"][2] == "¡Corre!"  # CR gone
    logged = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert logged == ["skipped 5 malformed lines: 2 wrong_columns, 2 empty_side, 1 undecodable"]


def test_cached_corpus_is_reused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = _cfg(FIXTURES / "tiny.tsv", tmp_path)
    first, _ = load_corpus(CorpusPlan.of(cfg))
    with caplog.at_level(logging.INFO, logger="seq2seq.data"):
        second, stats = load_corpus(CorpusPlan.of(cfg))
    assert not [r for r in caplog.records if "reading" in r.getMessage()]
    assert len(second) == len(first) == stats["pairs"] == 300
    assert second._fingerprint == first._fingerprint
    assert len(list((tmp_path / "cache").glob("corpus-*"))) == 1


def test_direction_swaps_columns(tmp_path: Path) -> None:
    en_es, _ = load_corpus(CorpusPlan.of(_cfg(FIXTURES / "tiny.tsv", tmp_path)))
    es_en, _ = load_corpus(CorpusPlan.of(_cfg(FIXTURES / "tiny.tsv", tmp_path, direction="es-en")))
    assert es_en["src"][:5] == en_es["tgt"][:5] and es_en["tgt"][:5] == en_es["src"][:5]


def test_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        load_corpus(CorpusPlan.of(_cfg(tmp_path / "missing.tsv", tmp_path)))
    (tmp_path / "empty.tsv").write_text("")
    with pytest.raises(DataError, match="has no lines"):
        load_corpus(CorpusPlan.of(_cfg(tmp_path / "empty.tsv", tmp_path)))
    (tmp_path / "bad.tsv").write_text("no tab\nalso no tab\n")
    with pytest.raises(DataError, match="2 of 2 lines are malformed"):
        load_corpus(CorpusPlan.of(_cfg(tmp_path / "bad.tsv", tmp_path)))
    assert not list((tmp_path / "cache").glob("corpus-*"))  # failures leave no cache behind


def test_relative_path_falls_back_to_repo_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_path("tests/fixtures/tiny.tsv") == (FIXTURES / "tiny.tsv").resolve()


def _sources(dataset: datasets.Dataset) -> set[str]:
    return set(dataset["src"][:])


def test_split_groups_by_source_and_is_deterministic(tmp_path: Path) -> None:
    pairs, _ = load_corpus(CorpusPlan.of(_cfg(FIXTURES / "tiny.tsv", tmp_path)))
    splits, _ = load_splits(_cfg(FIXTURES / "tiny.tsv", tmp_path, valid_size=20, test_size=25, split_seed=3))
    train, valid, test = (_sources(splits[name]) for name in ("train", "valid", "test"))
    assert (len(valid), len(test)) == (20, 25)
    assert not (train & valid or train & test or valid & test)
    assert sum(len(s) for s in splits.values()) == len(pairs)
    again, _ = load_splits(_cfg(FIXTURES / "tiny.tsv", tmp_path, valid_size=20, test_size=25, split_seed=3))
    assert again["valid"]["src"][:] == splits["valid"]["src"][:]
    assert again["test"]["tgt"][:] == splits["test"]["tgt"][:]
    other, _ = load_splits(_cfg(FIXTURES / "tiny.tsv", tmp_path, valid_size=20, test_size=25, split_seed=4))
    assert _sources(other["valid"]) != valid


def test_split_of_a_small_corpus_holds_out_at_least_one_source_each(tmp_path: Path) -> None:
    cfg = _cfg(FIXTURES / "broken.tsv", tmp_path, valid_size=3, test_size=2, max_malformed_share=0.5)
    splits, _ = load_splits(cfg)  # 5 sources: a tenth of them is less than one
    assert (len(splits["valid"]), len(splits["test"]), len(splits["train"])) == (1, 1, 3)


def test_references_collect_every_translation(tmp_path: Path) -> None:
    pairs, _ = load_corpus(CorpusPlan.of(_cfg(FIXTURES / "tiny.tsv", tmp_path)))
    sources, refs = references(pairs)
    assert len(sources) == len(set(sources)) == len(refs)
    assert sum(map(len, refs)) == len(pairs)
    multi = refs[sources.index("You had better go to bed now.")]
    assert len(multi) == 4 and len(set(multi)) == 4
