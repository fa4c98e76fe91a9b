"""Every relative link of README.md and docs/*.md points to a file that exists, and every anchor to a
heading of its page (GitHub's slugs: lower case, punctuation dropped, spaces as hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from compose import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```")


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
        for target in LINK.findall(line)
        if not re.match(r"[a-z]+:", target)  # http:, https:, mailto:
    ]


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
