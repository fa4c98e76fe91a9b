"""The pages speak of the project alone: README.md and docs/*.md name no issue, no commit, no machine
by a letter, and do not say how the measuring machines were come by (CHANGELOG.md, which names
versions, is not among them). The history of a measurement lives in its record's notes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.compose import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FORBIDDEN = {
    "an issue number": re.compile(r"(?<![\w&/])#\d+\b|\bissues? #?\d+\b|\bPR #?\d+\b", re.I),
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
    "a machine letter": re.compile(
        r"\b(?:on|of|at|from|machines?) [A-E]\b(?![\w'’.-])"  # "on E", "machine B"
        r"|(?:^|[|;(]\s*)[A-E](?: \([^)]*\))?:\s"  # "| A: 1.21×", "; B: 0.62", "A (...): 2.9 s"
        r"|\*\*[A-E]\*\*|\b[A-E] to [A-E]\b|\b[A-E]'s\b|\([A-E]\)",  # "**E**", "A to D", "B's", "(E)"
        re.M,
    ),
    "how a machine was obtained": re.compile(r"\blent\b|\bdevice time\b", re.I),
}


def findings(text: str) -> list[str]:
    """Each forbidden word of ``text``, with what it is and its line."""
    found = []
    for what, pattern in FORBIDDEN.items():
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{line}: {what}: {match.group(0).strip()!r}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_a_page_names_no_issue_commit_or_machine_letter(page: Path) -> None:
    assert findings(page.read_text()) == [], page.name


@pytest.mark.parametrize(
    "text",
    ["small (since #27)", "issue 37's step", "the code at a2c4f28",
     "at eec6170d5c9235e245214899ed51d0e9903c7de7", "measured on E, quiet", "| A: 1.21× / 1.24×; B: 1.38× |",
     "machines A to D", "B's checkpoint", "**E**: an AMD EPYC", "AVX2 fp32 (E)",
     "A (the 47.9-BLEU checkpoint): 2.9 s", "the GPUs lent to this project", "15 minutes of device time"],
)  # fmt: skip
def test_the_history_words_are_found(text: str) -> None:
    assert findings(text), text


@pytest.mark.parametrize(
    "text",
    ["A TSV of another language pair", "the (B, T, V) logits", "torch 2.13.0+cpu", "runs/2026-11-26_00-24-40",
     "results.md#lever-study", "AMD EPYC Zen 4 (AVX-512, AVX512-BF16, no AMX)", "fp32 and bf16, 8,000 types",
     "`--to ctranslate2`", "A100 and H100 GPUs", "a 2-core CPU: 1.5x"],
)  # fmt: skip
def test_plain_words_pass(text: str) -> None:
    assert findings(text) == [], text


# The user's pages say what to do and what happens, in the present tense; how a figure was obtained
# lives in its record's notes, and what changed in CHANGELOG.md.
USER_PAGES = [ROOT / "README.md", *(ROOT / "docs" / f"{name}.md" for name in (
    "tutorial", "training", "translating", "data", "serving", "export", "faq", "troubleshooting",
    "configuration", "distributed",
))]  # fmt: skip
MOST_WORDS_A_PAGE = 5_000
MOST_WORDS_IN_ALL = 24_108  # the pages and CHANGELOG.md together
COUNTED = [*PAGES, ROOT / "CHANGELOG.md"]
HISTORY = re.compile(
    r"\bno longer\b|\bas before\b|\bbefore the [\w-]+ changes?\b|\bthe (?:earlier|previous) "
    r"(?:version|default|code)\b|\bis now\b|\bare now\b|\bnow (?:runs?|uses?|shuffled|takes?|"
    r"keeps?|gives?|writes?|reads?)\b|\btargets? (?:is |are )?(?:not )?met\b|\bnot met\b|"
    r"\bload average\b|\bbefore this (?:change|feature)\b|\bolder than this feature\b",
    re.I,
)


def words(page: Path) -> int:
    """The page's words as ``wc -w`` counts them."""
    return len(page.read_text().split())


def history(text: str) -> list[str]:
    return [f"{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}" for m in HISTORY.finditer(text)]


@pytest.mark.parametrize("page", COUNTED, ids=lambda page: page.name)
def test_no_page_is_over_the_word_limit(page: Path) -> None:
    assert words(page) <= MOST_WORDS_A_PAGE, f"{page.name}: {words(page)} words"


def test_the_pages_together_are_under_the_word_limit() -> None:
    total = sum(words(page) for page in COUNTED)
    assert total <= MOST_WORDS_IN_ALL, f"the pages and CHANGELOG.md: {total} words"


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda page: page.name)
def test_a_user_page_tells_no_history(page: Path) -> None:
    assert history(page.read_text()) == [], page.name


@pytest.mark.parametrize(
    "text",
    ["this no longer happens", "the same lines as before", "before the beam-search changes",
     "each shard's pairs are now shuffled", "the target is not met", "target met on Zen 3",
     "at load average 10", "A checkpoint older than this feature", "the previous default made 249 steps"],
)  # fmt: skip
def test_the_history_phrases_are_found(text: str) -> None:
    assert history(text), text


@pytest.mark.parametrize(
    "text",
    ["the default run", "before training", "the run stops before it writes anything", "met the key",
     "from now on, run", "a newer version", "the target split", "target types"],
)  # fmt: skip
def test_plain_sentences_are_not_history(text: str) -> None:
    assert history(text) == [], text


# A lab note: a measurement's target, whether it was met, the rounds of a study. The pages a user
# reads to choose a setting say what to set and what it gives; the rest is in the records.
LAB_NOTE = re.compile(r"\bnot met\b|\btargets? (?:is |are )?met\b|\(targets? [\d.≥≤]|\brounds? \d+\b", re.I)
MEASURING_PAGES = [*USER_PAGES, *(ROOT / "docs" / f"{name}.md" for name in ("performance", "results"))]


@pytest.mark.parametrize("page", MEASURING_PAGES, ids=lambda page: page.name)
def test_a_user_page_keeps_no_lab_notes(page: Path) -> None:
    text = page.read_text()
    assert [f"{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}" for m in LAB_NOTE.finditer(text)] == []


@pytest.mark.parametrize(
    "text",
    ["61 % busy (target 90 %)", "Rounds 1 and 2, on the Zen 4", "Round 4, on the Xeon", "the target is met"],
)
def test_the_lab_notes_are_found(text: str) -> None:
    assert LAB_NOTE.search(text), text


@pytest.mark.parametrize("text", ["the target language", "round the weights", "target types", "rounded up"])
def test_plain_words_are_not_lab_notes(text: str) -> None:
    assert not LAB_NOTE.search(text), text
