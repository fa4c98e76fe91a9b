"""Every ```python block of README.md and docs/*.md runs as written, on a CPU, in a directory that
holds what the pages' snippets open: ``best.ckpt`` (the tiny trained checkpoint of ``trained.py``),
its CTranslate2 export ``exported/`` and its transformers export ``hf-model/``, made by the
commands the pages show. A block that cannot run here says so in the line above it,
``<!-- snippet not run: why -->``, and the test skips it with that reason."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

import pytest

from seq2seq.export.__main__ import main as export
from tests.helpers.compose import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"^(?:<!-- snippet not run: (?P<why>[^>]*?) -->\n)?```python\n(?P<code>.*?)^```", re.M | re.S
)


def snippets() -> list[tuple[str, str, str | None]]:
    """(page:line, code, why it is not run or None) of every Python block of the pages."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code"))
            found.append((f"{page.name}:{line}", match.group("code"), match.group("why")))
    return found


def test_the_pages_show_python_snippets() -> None:
    assert len(snippets()) >= 3  # the Python API of translating.md and export.md's two


@pytest.fixture(scope="module")
def workdir(trained_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with ``best.ckpt`` and its two exports, as the pages' commands make them."""
    directory = tmp_path_factory.mktemp("snippets")
    shutil.copy(trained_ckpt, directory / "best.ckpt")
    for engine, out in (("ctranslate2", "exported/"), ("transformers", "hf-model/")):
        argv = ["--ckpt", str(directory / "best.ckpt"), "--to", engine, str(directory / out)]
        assert export(argv) == 0, engine
    return directory


SNIPPETS = snippets()


@pytest.mark.parametrize(("where", "code", "why"), SNIPPETS, ids=[where for where, _, _ in SNIPPETS])
def test_a_python_snippet_runs(where: str, code: str, why: str | None, workdir: Path, monkeypatch) -> None:
    if why is not None:
        assert why.strip(), f"{where}: a snippet that is not run says why"
        pytest.skip(f"{where}: {why}")
    monkeypatch.chdir(workdir)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, where, "exec"), {"__name__": "__snippet__"})
    assert out.getvalue().strip(), f"{where}: the snippet printed nothing"
