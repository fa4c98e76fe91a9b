"""``python -m seq2seq.data.inspect``: the report on a small German-French corpus with known
duplicates, copies, a long pair and a malformed line, and its one-line errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from seq2seq.config import ConfigError, DataConfig
from seq2seq.data.describe import describe_corpus
from seq2seq.data.inspect import data_config, main, render

LONG = " ".join(f"Wort{i}" for i in range(40))


def _corpus(tmp_path: Path) -> Path:
    rows = [(f"Hallo {i}.", f"Salut {i}.") for i in range(50)]
    rows += [rows[0]] * 6  # duplicates
    rows += [("Paris.", "Paris."), ("Taxi!", "Taxi!")]  # source == target
    rows += [(LONG, "Un long.")]
    lines = [f"{i}\t{de}\t{fr}" for i, (de, fr) in enumerate(rows)]
    lines.insert(20, "ohne Spalten")
    path = tmp_path / "de_fr.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _overrides(tmp_path: Path, *more: str) -> list[str]:
    return [
        f"data.path={_corpus(tmp_path)}",
        "data.columns=[id,de,fr]",
        "data.direction=fr-de",
        "data.valid_size=5",
        "data.test_size=5",
        "data.max_length=8",
        f"data.cache_dir={tmp_path / 'cache'}",
        *more,
    ]


def test_the_report_counts_what_the_corpus_holds(tmp_path: Path) -> None:
    cfg = replace(data_config(_overrides(tmp_path)), max_malformed_share=0.05)
    report = describe_corpus(cfg)
    assert report.stats["pairs"] == 59 and report.verdict is None
    assert report.stats["malformed"]["wrong_columns"]["line"] == 21
    assert (report.distinct_pairs, report.distinct_sources, report.same_pairs) == (53, 53, 2)
    chars = [len(f"Salut {i}.") for i in range(50)] + [len("Salut 0.")] * 6 + [6, 5, 8]  # every pair
    assert report.lengths["fr chars"] == [float(v) for v in np.percentile(chars, [50, 90, 99, 100])]
    assert report.lengths["de chars"][-1] == len(LONG)
    assert report.sample_pairs == 59 and report.over_max_length == pytest.approx(1 / 59)
    de_tokens = report.lengths["de tokens"]
    assert de_tokens == sorted(de_tokens) and de_tokens[1] <= 8 < de_tokens[-1]  # p90 short, the max long
    assert [suggestion.met for suggestion in report.vocabulary] == [False]  # 59 pairs: too few for any size


def test_an_installed_package_without_configs_composes_the_schemas(tmp_path: Path) -> None:
    """A wheel ships no configs/: the data.* overrides still give what a checkout composes, but for
    the recipe's batch size and the bundled corpus's licence (its data option's), which a corpus
    report does not use."""
    overrides = _overrides(tmp_path)
    unused = {name: getattr(DataConfig, name) for name in ("max_tokens", "license", "attribution")}
    checkout = replace(data_config(overrides), **unused)
    assert data_config(overrides, tmp_path / "no-configs") == checkout
    with pytest.raises(ConfigError):
        data_config(["experiment=tiny"], tmp_path / "no-configs")


def test_the_command_prints_the_report_and_the_stop_training_would_make(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(_overrides(tmp_path)) == 1  # 1 malformed line of 60 is over the default 1 %
    out = capsys.readouterr().out.splitlines()
    for line in (
        "pairs: 59",
        "malformed lines: 1 (1.67%; training stops above data.max_malformed_share=0.01)",
        "duplicates: 6 pairs repeat an earlier pair (10.17%)",
        "distinct sources: 53; data.valid_size + data.test_size = 10 of them are held out",
        "source == target: 2 pairs (3.39%)",
        "over data.max_length=8 tokens: 1.69% of the sampled pairs (dropped: data.too_long=drop)",
    ):
        assert line in out, line
    stop = [line for line in out if line.startswith("training would stop: ")]
    assert len(stop) == 1 and "first wrong_columns at line 21: it holds no tab" in stop[0]


def test_separate_vocabularies_get_a_suggestion_each(tmp_path: Path) -> None:
    cfg = replace(data_config(_overrides(tmp_path, "data.shared_vocab=false")), max_malformed_share=0.05)
    report = describe_corpus(cfg)
    assert len(report.vocabulary) == 2
    table = render(report, cfg).splitlines()
    assert [line.split()[0] for line in table if line.startswith(("  source ", "  target "))] == [
        "source",
        "target",
    ]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.path=/no/such/corpus.tsv", "error: corpus file not found: /no/such/corpus.tsv"),
        ("data.no_such_key=1", "error: Could not override 'data.no_such_key'."),
        ("data.too_long=cut", "error: data.too_long must be 'drop' or 'truncate', got 'cut'"),
    ],
)
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture, override: str, message: str) -> None:
    assert main([override]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [message]
