"""Every relative link of README.md and docs/*.md points to a file that exists, and every anchor to a
heading of its page (GitHub's slugs: lower case, punctuation dropped, spaces as hyphens). A pointer
to a README section anywhere in the project ("README, Performance", "the README's Results section",
README.md#results) names a heading the README has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.compose import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)|<img [^>]*\bsrc=\"([^\"]+)\"")
FENCE = re.compile(r"^```")
POINTER_SOURCES = ("docs", "seq2seq", "configs", "slurm", "tests", "bench", "tools")
POINTER_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".sbatch", ".sh", ".toml"}
README_POINTER = re.compile(
    r"README(?:\.md)?#([\w-]+)"  # README.md#results
    r"|README(?:\.md)?,\s+\"?([A-Z][\w -]*[\w])"  # README, Performance / README, "Launchers"
    r"|README(?:\.md)?'s\s+\"?([A-Z][\w -]*?)\"?\s+section"  # the README's Results section
    r"|\b([A-Z][\w -]*?)\s+section\s+of\s+the\s+README"  # the Results section of the README
)


def prose(page: Path) -> list[str]:
    """The lines of a page outside fenced code blocks."""
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in prose(page) if re.match(r"#{1,6} ", line)}


def links() -> list[tuple[Path, str]]:
    return [
        (page, target)
        for page in PAGES
        for line in prose(page)
        for pair in LINK.findall(line)
        if not re.match(r"[a-z]+:", target := pair[0] or pair[1])  # http:, https:, mailto:
    ]


def readme_pointers(text: str) -> list[str]:
    """The README sections ``text`` points to, as slugs; comment markers and line breaks removed."""
    flat = re.sub(r"\s*\n\s*(?:#+|//|\*)?\s*", " ", text)
    return [slug(anchor or "".join(title)) for anchor, *title in README_POINTER.findall(flat)]


def pointer_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in POINTER_SOURCES:
        files += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in POINTER_SUFFIXES and p.is_file())
    return [f for f in files if f != Path(__file__).resolve() and "fixtures" not in f.parts]


def test_a_pointer_to_a_readme_section_names_a_heading_it_has() -> None:
    headings = anchors(ROOT / "README.md")
    stale = [
        f"{path.relative_to(ROOT)}: README section {pointer!r}"
        for path in pointer_files()
        for pointer in readme_pointers(path.read_text(errors="replace"))
        if not any(heading.startswith(pointer) for heading in headings)
    ]
    assert stale == []


def test_readme_pointers_are_found_in_every_form() -> None:
    text = """(README, Performance) and README, "Launchers" and the README's Results section,
    # see the Hardware and time section of the README, README.md#quick-start and a wrapped README,
    # Hugging Face transformers"""
    assert readme_pointers(text) == [
        "performance", "launchers", "results", "hardware-and-time", "quick-start", "hugging-face-transformers"
    ]  # fmt: skip


def test_the_pages_have_relative_links() -> None:
    assert len(links()) > 20  # the README links every page, the pages link each other


@pytest.mark.parametrize(("page", "target"), links(), ids=lambda value: str(value))
def test_a_relative_link_points_to_an_existing_file_and_heading(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    assert file.exists(), f"{page.name}: {target}: no such file"
    if anchor:
        assert file.suffix == ".md", f"{page.name}: {target}: an anchor into a file that is not a page"
        assert anchor in anchors(file), f"{page.name}: {target}: no heading #{anchor} in {file.name}"


def test_slugs_follow_github() -> None:
    assert slug("Lever study (issue #27)") == "lever-study-issue-27"
    assert slug("Translate, watch, serve, export") == "translate-watch-serve-export"
