"""Every format ``data.path`` takes, read as training reads it, for a language pair other than the
bundled one (German-French, with a column that is no language) in both directions; CSV headers;
aligned files that do not align; and the cache key's options."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Callable
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seq2seq.config import DataConfig, DataError
from seq2seq.data.corpus import CorpusPlan, load_corpus

ROWS = [  # (de, fr): commas, quotes, apostrophes and non-ASCII letters
    ("Guten Morgen, Anna.", "Bonjour, Anna."),
    ("Er sagt: „Nein“.", "Il dit : « Non »."),
    ('Sie heißt "Zoë".', "Elle s'appelle « Zoë »."),
    ("Wie spät ist es?", "Quelle heure est-il ?"),
]


def _tsv(tmp_path: Path) -> tuple[object, list[str]]:
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{i}\t{de}\t{fr}\n" for i, (de, fr) in enumerate(ROWS)), encoding="utf-8")
    return str(path), ["id", "de", "fr"]


def _tsv_gz(tmp_path: Path) -> tuple[object, list[str]]:
    path = tmp_path / "pairs.txt.gz"
    path.write_bytes(gzip.compress("".join(f"{fr}\t{de}\r\n" for de, fr in ROWS).encode()))
    return str(path), ["fr", "de"]


def _csv_with_header(tmp_path: Path) -> tuple[object, list[str]]:
    path = tmp_path / "pairs.csv"
    quoted = ['"' + text.replace('"', '""') + '"' for row in ROWS for text in row]
    lines = [f"{i},{quoted[2 * i]},{quoted[2 * i + 1]}\n" for i in range(len(ROWS))]
    path.write_text("ID,DE,FR\n" + "".join(lines), encoding="utf-8")
    return str(path), ["id", "de", "fr"]


def _jsonl(tmp_path: Path) -> tuple[object, list[str]]:
    path = tmp_path / "pairs.jsonl"
    records = [{"id": i, "de": de, "fr": fr} for i, (de, fr) in enumerate(ROWS)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return str(path), ["de", "fr"]


def _jsonl_nested(tmp_path: Path) -> tuple[object, list[str]]:
    path = tmp_path / "pairs.jsonl"
    records = [{"translation": {"de": de, "fr": fr}} for de, fr in ROWS]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path), ["de", "fr"]


def _parquet(tmp_path: Path) -> tuple[object, list[str]]:
    path = tmp_path / "pairs.parquet"
    de, fr = zip(*ROWS, strict=True)
    pq.write_table(pa.table({"fr": list(fr), "de": list(de), "score": [1.0] * len(ROWS)}), path)
    return str(path), ["de", "fr"]


def _parquet_nested(tmp_path: Path) -> tuple[object, list[str]]:
    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"translation": [{"de": de, "fr": fr} for de, fr in ROWS]}), path)
    return str(path), ["de", "fr"]


def _saved_dataset(tmp_path: Path) -> tuple[object, list[str]]:
    de, fr = zip(*ROWS, strict=True)
    datasets.Dataset.from_dict({"de": list(de), "fr": list(fr)}).save_to_disk(tmp_path / "saved")
    return str(tmp_path / "saved"), ["de", "fr"]


def _saved_dataset_dict(tmp_path: Path) -> tuple[object, list[str]]:
    rows = [{"de": de, "fr": fr} for de, fr in ROWS]
    other = datasets.Dataset.from_dict({"translation": [{"de": "Nein.", "fr": "Non."}]})
    splits = {"train": datasets.Dataset.from_dict({"translation": rows}), "validation": other}
    datasets.DatasetDict(splits).save_to_disk(tmp_path / "saved")
    return str(tmp_path / "saved"), ["de", "fr"]


def _write_aligned(tmp_path: Path, stem: str = "corpus") -> tuple[Path, Path]:
    de_file, fr_file = tmp_path / f"{stem}.de", tmp_path / f"{stem}.fr"
    de_file.write_text("".join(de + "\n" for de, _ in ROWS), encoding="utf-8")
    fr_file.write_text("".join(fr + "\n" for _, fr in ROWS), encoding="utf-8")
    return de_file, fr_file


def _aligned_list(tmp_path: Path) -> tuple[object, list[str]]:
    return [str(path) for path in _write_aligned(tmp_path)], ["de", "fr"]


def _aligned_glob(tmp_path: Path) -> tuple[object, list[str]]:
    _write_aligned(tmp_path)
    return str(tmp_path / "corpus.*"), ["fr", "de"]  # matched to the columns by suffix, not by name order


FORMATS: dict[str, Callable[[Path], tuple[object, list[str]]]] = {
    "tsv": _tsv,
    "tsv_gz_crlf": _tsv_gz,
    "csv_header": _csv_with_header,
    "jsonl": _jsonl,
    "jsonl_nested": _jsonl_nested,
    "parquet": _parquet,
    "parquet_nested": _parquet_nested,
    "save_to_disk": _saved_dataset,
    "save_to_disk_dict": _saved_dataset_dict,
    "aligned_list": _aligned_list,
    "aligned_glob": _aligned_glob,
}


def _cfg(tmp_path: Path, path: object, columns: list[str], **overrides: object) -> DataConfig:
    overrides = {"direction": "de-fr", **overrides}
    return DataConfig(path=path, columns=columns, cache_dir=str(tmp_path / "cache"), **overrides)


def _pairs(cfg: DataConfig) -> list[tuple[str, str]]:
    pairs, _ = load_corpus(CorpusPlan.of(cfg))
    return list(zip(pairs["src"][:], pairs["tgt"][:], strict=True))


@pytest.mark.parametrize("name", FORMATS)
def test_every_format_reads_another_language_pair_both_ways(tmp_path: Path, name: str) -> None:
    path, columns = FORMATS[name](tmp_path)
    de_fr, stats = load_corpus(CorpusPlan.of(_cfg(tmp_path, path, columns, direction="de-fr")))
    assert list(zip(de_fr["src"][:], de_fr["tgt"][:], strict=True)) == ROWS
    assert (stats["pairs"], stats["malformed_lines"]) == (len(ROWS), 0)
    assert _pairs(_cfg(tmp_path, path, columns, direction="fr-de")) == [(fr, de) for de, fr in ROWS]


def _csv(tmp_path: Path, first_line: str) -> str:
    path = tmp_path / "pairs.csv"
    path.write_text(first_line + "".join(f'"{de}","{fr}"\n' for de, fr in ROWS[:2]), encoding="utf-8")
    return str(path)


def test_a_csv_header_is_detected_by_the_column_names_or_configured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="seq2seq.data"):
        assert _pairs(_cfg(tmp_path, _csv(tmp_path, " de , Fr\n"), ["de", "fr"])) == ROWS[:2]
    assert any("read as a header, not a pair" in r.getMessage() for r in caplog.records)
    named = _csv(tmp_path, "German,French\n")  # not the names in data.columns: a pair, unless configured
    assert _pairs(_cfg(tmp_path, named, ["de", "fr"])) == [("German", "French"), *ROWS[:2]]
    assert _pairs(_cfg(tmp_path, named, ["de", "fr"], header=True)) == ROWS[:2]
    assert _pairs(_cfg(tmp_path, _csv(tmp_path, "de,fr\n"), ["de", "fr"], header=False))[0] == ("de", "fr")
    assert _pairs(_cfg(tmp_path, _csv(tmp_path, ""), ["de", "fr"], header=True)) == ROWS[1:2]
    with pytest.raises(DataError, match=r"line 1 names the columns fr,de .* set data.columns=\[fr,de\]"):
        load_corpus(CorpusPlan.of(_cfg(tmp_path, _csv(tmp_path, "fr,de\n"), ["de", "fr"])))


def test_csv_fields_may_hold_newlines_and_line_numbers_stay_physical(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text('"Zwei\nZeilen","Deux\nlignes"\nnur eine Spalte\n"Ja","Oui"\n', encoding="utf-8")
    cfg = _cfg(tmp_path, str(path), ["de", "fr"], max_malformed_share=0.5)
    pairs, stats = load_corpus(CorpusPlan.of(cfg))
    assert pairs["src"][:] == ["Zwei\nZeilen", "Ja"]
    assert stats["malformed"]["wrong_columns"]["line"] == 4  # the record before it spans lines 1-3


def test_aligned_files_of_different_lengths_name_both_files_and_counts(tmp_path: Path) -> None:
    de_file, fr_file = _write_aligned(tmp_path)
    fr_file.write_text("Bonjour.\nSalut.\n", encoding="utf-8")
    with pytest.raises(DataError) as error:
        load_corpus(CorpusPlan.of(_cfg(tmp_path, [str(de_file), str(fr_file)], ["de", "fr"])))
    message = str(error.value)
    assert "\n" not in message
    assert f"{de_file} has 4 lines, {fr_file} has 2 lines" in message
    assert not list((tmp_path / "cache").glob("corpus-*"))


def test_aligned_files_must_match_the_languages_of_data_columns(tmp_path: Path) -> None:
    de_file, fr_file = _write_aligned(tmp_path)
    with pytest.raises(DataError, match=r"lists corpus.fr where data.columns \['de', 'fr'\] has de"):
        load_corpus(CorpusPlan.of(_cfg(tmp_path, [str(fr_file), str(de_file)], ["de", "fr"])))
    with pytest.raises(DataError, match=r"one per language of data\.columns"):
        three = _cfg(tmp_path, [str(de_file), str(fr_file)], ["de", "fr", "it"], direction="de-fr")
        load_corpus(CorpusPlan.of(three))
    _write_aligned(tmp_path, "other")
    with pytest.raises(DataError, match=r"must end in those of data\.columns"):
        load_corpus(CorpusPlan.of(_cfg(tmp_path, str(tmp_path / "*.de"), ["de", "fr"])))
    with pytest.raises(DataError, match="matches no file"):
        load_corpus(CorpusPlan.of(_cfg(tmp_path, str(tmp_path / "*.it"), ["de", "fr"])))


def test_aligned_blank_lines_keep_the_alignment(tmp_path: Path) -> None:
    de_file, fr_file = tmp_path / "c.de", tmp_path / "c.fr"
    de_file.write_text("Ja.\n\n\nNein.\n", encoding="utf-8")
    fr_file.write_text("Oui.\n\nSeul.\nNon.\n", encoding="utf-8")
    cfg = _cfg(tmp_path, [str(de_file), str(fr_file)], ["de", "fr"], max_malformed_share=0.5)
    pairs, stats = load_corpus(CorpusPlan.of(cfg))
    assert list(zip(pairs["src"][:], pairs["tgt"][:], strict=True)) == [("Ja.", "Oui."), ("Nein.", "Non.")]
    assert stats["malformed"] == {
        "empty_side": {
            "count": 1,
            "file": str(de_file),
            "line": 3,
            "fix": stats["malformed"]["empty_side"]["fix"],
        }
    }


def test_keyed_formats_count_each_cause(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    lines = [
        '{"de": "Ja.", "fr": "Oui."}',
        "not json",
        '["de", "fr"]',
        '{"de": "Ja."}',
        '{"de": 1, "fr": "Un."}',
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, stats = load_corpus(CorpusPlan.of(_cfg(tmp_path, str(path), ["de", "fr"], max_malformed_share=0.9)))
    found = {cause: (entry["count"], entry["line"]) for cause, entry in stats["malformed"].items()}
    assert found == {"bad_json": (2, 2), "missing_language": (1, 4), "not_text": (1, 5)}


def test_a_columnar_file_without_the_languages_is_one_line_naming_its_columns(tmp_path: Path) -> None:
    path, _ = _parquet(tmp_path)
    with pytest.raises(DataError, match=r"no columns en and es .* its columns: fr, de, score"):
        load_corpus(CorpusPlan.of(_cfg(tmp_path, path, ["en", "es"], direction="en-es")))
    folder, _ = _saved_dataset_dict(tmp_path)
    with pytest.raises(DataError, match=r"the splits train, validation: choose one with data\.hub_split"):
        load_corpus(CorpusPlan.of(_cfg(tmp_path, folder, ["de", "fr"], hub_split="test")))
    assert _pairs(_cfg(tmp_path, folder, ["de", "fr"], hub_split="validation")) == [("Nein.", "Non.")]
