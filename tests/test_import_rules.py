"""The layout by stage: data -> model -> decoding -> inference -> training / serving / export, with
the two on-disk formats (seq2seq/formats/checkpoint.py, seq2seq/formats/export_folder.py) below every user. No
stage imports one above it, so the packages form no loop."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.compose import ROOT

SEQ2SEQ = ROOT / "seq2seq"
FORMATS = ["formats"]


def imported_modules(path: Path) -> list[tuple[Path, str]]:
    """(file, module) for every ``import`` in the package or file ``path``; ``from seq2seq import x``
    counts as ``seq2seq.x``."""
    found = []
    for file in path.rglob("*.py") if path.is_dir() else [path]:
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [(file, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.append((file, node.module))
                found += [(file, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


@pytest.mark.parametrize("place", ["inference", "export", "serving", "decoding", "model", "data", *FORMATS])
def test_nothing_below_training_imports_it(place: str) -> None:
    """The checkpoint format has one owner below them all (seq2seq/formats/checkpoint.py)."""
    assert not [(f, m) for f, m in imported_modules(SEQ2SEQ / place) if within(m, "seq2seq.training")]


@pytest.mark.parametrize("place", ["inference", "serving", "decoding", "model", "data", *FORMATS])
def test_nothing_below_export_imports_it(place: str) -> None:
    """Inference reads export folders through their format (seq2seq/formats/export_folder.py), not the
    exporters."""
    assert not [(f, m) for f, m in imported_modules(SEQ2SEQ / place) if within(m, "seq2seq.export")]


@pytest.mark.parametrize("place", ["export", "inference", "decoding", "model", "data", *FORMATS])
def test_nothing_but_the_server_imports_serving(place: str) -> None:
    assert not [(f, m) for f, m in imported_modules(SEQ2SEQ / place) if within(m, "seq2seq.serving")]


def test_the_rule_sees_every_form_of_import(tmp_path: Path) -> None:
    """So that the tests above can fail."""
    (tmp_path / "a.py").write_text("import seq2seq.export.x\nfrom seq2seq import training\n")
    (tmp_path / "b.py").write_text("from seq2seq.formats.export_folder import load_bundle\n")
    modules = [module for _, module in imported_modules(tmp_path / "a.py")]
    assert within(modules[0], "seq2seq.export") and within(modules[-1], "seq2seq.training")
    assert not [m for _, m in imported_modules(tmp_path / "b.py") if within(m, "seq2seq.export")]
