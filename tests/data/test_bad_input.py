"""Bad data as a user gives it (a binary corpus, a cache folder no one can write): one line."""

from __future__ import annotations

from pathlib import Path

from seq2seq.data import inspect
from seq2seq.data.streamed.build import main as build_main
from tests.helpers.bad_input import one_line
from tests.helpers.compose import ROOT
from tests.helpers.in_process import python


def test_a_binary_corpus_is_not_called_utf_16(tmp_path: Path, capsys) -> None:
    """The corpus as training reads it (``python -m seq2seq.data.inspect`` composes the same config)."""
    corpus = tmp_path / "corpus.tsv"
    corpus.write_bytes(bytes(range(256)) * 64)  # NUL bytes, and no text in any encoding
    overrides = ["experiment=tiny", f"data.path={corpus}", f"data.cache_dir={tmp_path / 'cache'}"]
    assert inspect.main(overrides) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"error: {corpus}: ")
    assert line.endswith(
        "first undecodable at line 1: NUL bytes, and not UTF-16 text either: is it a text file?"
    )


def _unwritable_cache(tmp_path: Path) -> tuple[Path, str]:
    """A data.cache_dir no one can create (a file stands where its parent should be: as root,
    permissions would not stop the write) and the line that says so."""
    (tmp_path / "file").write_text("not a folder\n", encoding="utf-8")
    cache = tmp_path / "file" / "cache"
    return cache, (
        f"error: cannot write the data cache at {cache / 'digests'}: Not a directory; "
        "set data.cache_dir to a directory you can write"
    )


def test_an_unwritable_cache_is_one_line_from_the_data_build(tmp_path: Path, capsys) -> None:
    cache, line = _unwritable_cache(tmp_path)
    assert build_main(["data=tiny", f"data.cache_dir={cache}"]) == 1
    assert one_line(capsys.readouterr().err) == line


def test_an_unwritable_cache_is_one_line_from_train_py(tmp_path: Path) -> None:
    cache, line = _unwritable_cache(tmp_path)
    run_dir = tmp_path / "run"
    result = python(
        str(ROOT / "train.py"), "experiment=tiny", f"hydra.run.dir={run_dir}", f"data.cache_dir={cache}"
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == line  # after Lightning's "Seed set to 42"
    assert not run_dir.exists()
