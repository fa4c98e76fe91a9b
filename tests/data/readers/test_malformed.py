"""Malformed records: counted per cause, a one-line stop above ``data.max_malformed_share`` that
names the file, the count, the first bad line and the fix (an encoding, guessed from the bytes);
and a corpus cache keyed on every option that changes what is read."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest

from seq2seq.config import ConfigError, DataConfig, DataError, validated
from seq2seq.data.corpus import CorpusPlan, load_corpus
from seq2seq.data.readers.malformed import guess_encoding

PAIRS = [(f"Satz {i}: schön.", f"Phrase {i} : à côté « ici ».") for i in range(200)]


def _tsv(tmp_path: Path, pairs: list[tuple[str, str]], bad_lines: int = 0, encoding: str = "utf-8") -> Path:
    lines = [f"{de}\t{fr}" for de, fr in pairs]
    for k in range(bad_lines):
        lines[10 + 40 * k] = "kein Tabulator"
    path = tmp_path / "pairs.tsv"
    path.write_bytes("".join(line + "\n" for line in lines).encode(encoding))
    return path


def _cfg(tmp_path: Path, path: object, **overrides: object) -> DataConfig:
    return DataConfig(
        path=path, columns=["de", "fr"], direction="de-fr", cache_dir=str(tmp_path / "cache"), **overrides
    )


def test_under_the_share_malformed_lines_are_skipped_and_logged_by_cause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _tsv(tmp_path, PAIRS, bad_lines=2)  # 1 % of 200 lines: not over it
    with caplog.at_level(logging.WARNING, logger="seq2seq.data"):
        pairs, stats = load_corpus(CorpusPlan.of(_cfg(tmp_path, str(path))))
    assert len(pairs) == 198 and stats["malformed"]["wrong_columns"]["count"] == 2
    assert [r.getMessage() for r in caplog.records] == ["skipped 2 malformed lines: 2 wrong_columns"]


def test_over_the_share_the_run_stops_with_one_line(tmp_path: Path) -> None:
    path = _tsv(tmp_path, PAIRS, bad_lines=3)
    with pytest.raises(DataError) as error:
        load_corpus(CorpusPlan.of(_cfg(tmp_path, str(path))))
    assert str(error.value) == (
        f"{path}: 3 of 200 lines are malformed (3 wrong_columns), over data.max_malformed_share=0.01; "
        "first wrong_columns at line 11: it holds no tab: one goes between columns "
        "(a comma-separated file needs the .csv suffix)"
    )
    cfg = _cfg(tmp_path, str(path), max_malformed_share=0.02)
    pairs, _ = load_corpus(CorpusPlan.of(cfg))  # the cache, checked again
    assert len(pairs) == 197


@pytest.mark.parametrize(
    ("encoding", "pairs", "fix"),
    [
        ("latin-1", PAIRS, "looks like Latin-1: set data.encoding=latin-1"),
        (
            "cp1252",
            [(f"„{de}“", f"“{fr}” – ok") for de, fr in PAIRS],
            "looks like Windows-1252: set data.encoding=cp1252",
        ),
        ("utf-16", PAIRS, "NUL bytes: looks like UTF-16: set data.encoding=utf-16"),
        ("utf-16-le", PAIRS, "NUL bytes: looks like UTF-16: set data.encoding=utf-16-le"),  # no BOM
        ("utf-16-be", PAIRS, "NUL bytes: looks like UTF-16: set data.encoding=utf-16-be"),
    ],
)
def test_a_file_in_another_encoding_names_it_and_reads_with_it(
    tmp_path: Path, encoding: str, pairs: list[tuple[str, str]], fix: str
) -> None:
    path = _tsv(tmp_path, pairs, encoding=encoding)
    with pytest.raises(DataError) as error:
        load_corpus(CorpusPlan.of(_cfg(tmp_path, str(path))))
    every_line = r"(\d+) of \1 lines are malformed \(\1 undecodable\)"  # UTF-16's last NUL: one more
    expected = rf"{re.escape(str(path))}: {every_line}; first undecodable at line 1: {re.escape(fix)}"
    assert re.fullmatch(expected, str(error.value))
    read, stats = load_corpus(CorpusPlan.of(_cfg(tmp_path, str(path), encoding=encoding)))
    assert list(zip(read["src"][:], read["tgt"][:], strict=True)) == pairs and stats["malformed_lines"] == 0


def test_the_guess_reads_the_bytes() -> None:
    assert guess_encoding("¿Qué tal, señor?".encode("latin-1")).endswith("data.encoding=latin-1")
    assert guess_encoding("it’s".encode("cp1252")).endswith("data.encoding=cp1252")
    assert guess_encoding("¿Qué tal?".encode()).endswith("data.encoding=utf-8")  # read as ASCII, say
    assert guess_encoding(b"\x81\x8d").startswith("set data.encoding to the file's encoding")
    binary = bytes(range(256)) * 4  # NUL bytes that are no text: no encoding to suggest
    assert guess_encoding(binary) == "NUL bytes, and not UTF-16 text either: is it a text file?"


def _corpus_caches(tmp_path: Path) -> int:
    return len(list((tmp_path / "cache").glob("corpus-*")))


def test_the_cache_key_covers_every_option_that_changes_what_is_read(tmp_path: Path) -> None:
    path = _tsv(tmp_path, PAIRS[:50], encoding="latin-1")
    load_corpus(CorpusPlan.of(_cfg(tmp_path, str(path), encoding="latin-1")))
    cp1252 = _cfg(tmp_path, str(path), encoding="cp1252")
    load_corpus(CorpusPlan.of(cp1252))  # the same text here, but another file may differ
    assert _corpus_caches(tmp_path) == 2
    headed, _ = load_corpus(CorpusPlan.of(_cfg(tmp_path, str(path), encoding="latin-1", header=True)))
    assert _corpus_caches(tmp_path) == 3 and len(headed) == 49
    copy = tmp_path / "renamed.tsv"
    shutil.copy(path, copy)
    copied = _cfg(tmp_path, str(copy), encoding="latin-1")
    load_corpus(CorpusPlan.of(copied))  # content-addressed: no new cache
    assert _corpus_caches(tmp_path) == 3

    de_file, fr_file, other = tmp_path / "c.de", tmp_path / "c.fr", tmp_path / "d.fr"
    de_file.write_text("Ja.\nNein.\n")
    fr_file.write_text("Oui.\nNon.\n")
    other.write_text("Si.\nNon.\n")
    load_corpus(CorpusPlan.of(_cfg(tmp_path, [str(de_file), str(fr_file)])))
    load_corpus(CorpusPlan.of(_cfg(tmp_path, [str(de_file), str(other)])))
    assert _corpus_caches(tmp_path) == 5
    headed = _cfg(tmp_path, [str(de_file), str(fr_file)], header=True)
    load_corpus(CorpusPlan.of(headed))  # no header in aligned text
    assert _corpus_caches(tmp_path) == 5


def test_data_options_are_validated_with_their_key() -> None:
    with pytest.raises(ConfigError, match=r"^data\.path must be a path or a list of paths"):
        DataConfig(path=["a.de", 3])
    with pytest.raises(ConfigError, match=r"data\.encoding: unknown encoding 'latin-9x'"):
        DataConfig(encoding="latin-9x")
    with pytest.raises(ConfigError, match=r"data.max_malformed_share must be in \[0, 1\]"):
        DataConfig(max_malformed_share=1.5)
    with pytest.raises(ConfigError, match=r"^data: Value 'sometimes' is not a valid bool"):
        validated(DataConfig, {"header": "sometimes"}, "data")
    assert validated(DataConfig, {"path": ["a.en", "a.es"], "header": "true"}, "data").header is True
