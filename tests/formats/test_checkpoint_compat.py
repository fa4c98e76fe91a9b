"""Checkpoints written by earlier versions still load and translate (CHANGELOG.md's promise).

``fixtures/checkpoint-<version>.ckpt`` was written by that version: the tiny model of
``trained.py`` at d_model 16, one layer each side, trained until it knew the first
:data:`LEARNT` pairs of ``fixtures/tiny.tsv`` by heart, so that it gives their references
exactly and no near-tie between two tokens can turn a later version's output. 0.1.0's came from
``train_tiny_checkpoint(directory, steps=300, batch_size=20, pairs=20, d_model=16, d_ff=32,
n_encoder_layers=1, n_decoder_layers=1)``, with its global step (300) added and the data config's
``path`` and ``cache_dir`` set to ``tests/fixtures/tiny.tsv`` and the default, so that the file
names no directory of the machine that wrote it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from seq2seq.inference.backends import open_model
from tests.helpers.compose import ROOT
from tests.helpers.tiny import CORPUS

FIXTURES = sorted((ROOT / "tests" / "fixtures").glob("checkpoint-*.ckpt"))
LEARNT = 20
PAIRS = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()][:LEARNT]
SOURCES = [source for source, _ in PAIRS]
REFERENCES = [reference for _, reference in PAIRS]


def version(path: Path) -> str:
    return path.stem.removeprefix("checkpoint-")


def test_there_is_a_checkpoint_of_an_earlier_version_and_the_changelog_names_it() -> None:
    assert FIXTURES
    changelog = (ROOT / "CHANGELOG.md").read_text()
    for path in FIXTURES:
        assert f"## {version(path)} " in changelog and f"tests/fixtures/{path.name}" in changelog


@pytest.mark.parametrize("path", FIXTURES, ids=version)
@pytest.mark.parametrize("beam", ["1", "3"])
def test_translate_py_translates_with_it_as_when_it_was_written(
    path: Path, beam: str, run_cli: Callable[..., tuple[int, list[str], str]]
) -> None:
    code, lines, err = run_cli("--ckpt", str(path), "--dtype", "float32", "--beam", beam, *SOURCES)
    assert code == 0, err
    assert lines == REFERENCES


@pytest.mark.parametrize("path", FIXTURES, ids=version)
def test_the_translator_opens_it_with_its_model_and_settings(path: Path) -> None:
    opened = open_model(path, device="cpu", dtype="float32")
    assert (opened.facts.model_config.d_model, opened.facts.data_config.direction) == (16, "en-es")
    best = [hypotheses[0].text for hypotheses in opened.translator.translate(SOURCES)]
    assert best == REFERENCES
