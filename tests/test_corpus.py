"""Corpus reading, cleaning, caching and the grouped deterministic split."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import datasets
import pytest

from seq2seq.config import DataConfig, DataError
from seq2seq.data.corpus import load_corpus, load_splits, references
from seq2seq.data.sources import resolve_path

FIXTURES = Path(__file__).parent / "fixtures"


def _cfg(path: Path | str, tmp_path: Path, **overrides: object) -> DataConfig:
    return DataConfig(path=str(path), cache_dir=str(tmp_path / "cache"), **overrides)


def test_broken_lines_are_skipped_and_counted_exactly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="seq2seq.data"):
        pairs, stats = load_corpus(_cfg(FIXTURES / "broken.tsv", tmp_path))
    assert stats == {
        "pairs": 5,
        "malformed_lines": 5,
        "malformed_bad_utf8": 1,
        "malformed_wrong_columns": 2,
        "malformed_empty_side": 2,
    }
    assert pairs["src"][:] == ["Go.", "Hi.", "Run!", "I'm 19.", "Thank you."]  # BOM gone
    assert pairs["tgt"][2] == "¡Corre!"  # CR gone
    assert len([r for r in caplog.records if "malformed" in r.getMessage()]) == 1


def test_cached_corpus_is_reused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = _cfg(FIXTURES / "tiny.tsv", tmp_path)
    first, _ = load_corpus(cfg)
    with caplog.at_level(logging.INFO, logger="seq2seq.data"):
        second, stats = load_corpus(cfg)
    assert not [r for r in caplog.records if "reading" in r.getMessage()]
    assert len(second) == len(first) == stats["pairs"] == 300
    assert second._fingerprint == first._fingerprint
    assert len(list((tmp_path / "cache").glob("corpus-*"))) == 1


def test_direction_swaps_columns(tmp_path: Path) -> None:
    en_es, _ = load_corpus(_cfg(FIXTURES / "tiny.tsv", tmp_path))
    es_en, _ = load_corpus(_cfg(FIXTURES / "tiny.tsv", tmp_path, direction="es-en"))
    assert es_en["src"][:5] == en_es["tgt"][:5] and es_en["tgt"][:5] == en_es["src"][:5]


@pytest.mark.parametrize("name", ["pairs.csv.gz", "pairs.jsonl", "pairs.txt"])
def test_other_formats(tmp_path: Path, name: str) -> None:
    rows = [("Hello, world.", "Hola, mundo."), ("I'm here.", "Estoy aquí.")]
    if name.startswith("pairs.csv"):
        text = "".join(f'"{en}","{es}"\n' for en, es in rows)
    elif name.endswith(".jsonl"):
        text = "".join(json.dumps({"en": en, "es": es}, ensure_ascii=False) + "\n" for en, es in rows)
    else:
        text = "".join(f"{en}\t{es}\n" for en, es in rows)
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    pairs, stats = load_corpus(_cfg(path, tmp_path))
    assert list(zip(pairs["src"][:], pairs["tgt"][:], strict=True)) == rows and stats["malformed_lines"] == 0


def test_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        load_corpus(_cfg(tmp_path / "missing.tsv", tmp_path))
    (tmp_path / "empty.tsv").write_text("")
    with pytest.raises(DataError, match="no lines"):
        load_corpus(_cfg(tmp_path / "empty.tsv", tmp_path))
    (tmp_path / "bad.tsv").write_text("no tab\nalso no tab\n")
    with pytest.raises(DataError, match="all 2 lines are malformed"):
        load_corpus(_cfg(tmp_path / "bad.tsv", tmp_path))
    assert not list((tmp_path / "cache").glob("corpus-*"))  # failures leave no cache behind


def test_relative_path_falls_back_to_repo_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_path("tests/fixtures/tiny.tsv") == (FIXTURES / "tiny.tsv").resolve()


def _sources(dataset: datasets.Dataset) -> set[str]:
    return set(dataset["src"][:])


def test_split_groups_by_source_and_is_deterministic(tmp_path: Path) -> None:
    pairs, _ = load_corpus(_cfg(FIXTURES / "tiny.tsv", tmp_path))
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


def test_split_needs_training_sentences(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="distinct source sentences"):
        load_splits(_cfg(FIXTURES / "broken.tsv", tmp_path, valid_size=3, test_size=2))


def test_references_collect_every_translation(tmp_path: Path) -> None:
    pairs, _ = load_corpus(_cfg(FIXTURES / "tiny.tsv", tmp_path))
    sources, refs = references(pairs)
    assert len(sources) == len(set(sources)) == len(refs)
    assert sum(map(len, refs)) == len(pairs)
    multi = refs[sources.index("You had better go to bed now.")]
    assert len(multi) == 4 and len(set(multi)) == 4
