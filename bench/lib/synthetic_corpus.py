"""A deterministic synthetic English-Spanish corpus of any size, made from the bundled one.

Repeating the bundled corpus would flatter the tokenizer and the caches (few distinct words, a
cache that compresses to nothing), so each synthetic pair is new: one to three bundled pairs
joined as clauses ("A, and b." / "A y b."), and the names Tom and Mary (in a sixth of the
bundled pairs, written the same in both languages) replaced by made-up names whose number grows
with the corpus, as a real corpus's vocabulary does. Same seed, same corpus, byte for byte.

    python -m bench.lib.synthetic_corpus --pairs 5000000 OUT.tsv
"""

from __future__ import annotations

import argparse
import gzip
import re
import time
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import numpy as np

from bench.lib.measure import CORPUS

_SYLLABLES = [consonant + vowel for consonant in "bdklmnrst" for vowel in "aeiou"]
_CLAUSES = (1, 2, 3)
_CLAUSE_SHARES = (0.1, 0.65, 0.25)
_PAIRS_PER_NEW_NAME = 20  # the i-th pair draws its names from i / 20 + 1 candidates
_CHUNK = 100_000
_NAMES = {name: re.compile(rf"\b{name}\b") for name in ("Tom", "Mary")}


def _bundled_pairs() -> tuple[list[str], list[str]]:
    english, spanish = [], []
    for line in gzip.decompress(CORPUS.read_bytes()).decode("utf-8").splitlines():
        en, es = line.split("\t")[:2]
        english.append(en)
        spanish.append(es)
    return english, spanish


def made_up_name(k: int) -> str:
    """The k-th made-up name: two or more syllables, capitalised."""
    k += len(_SYLLABLES)
    parts = []
    while k:
        k, digit = divmod(k, len(_SYLLABLES))
        parts.append(_SYLLABLES[digit])
    return "".join(parts).capitalize()


def _lower_first(clause: str, names: set[str]) -> str:
    """A clause that goes on a sentence: its first letter (after ¿ or ¡) in lower case, unless
    it starts a name or is the pronoun I."""
    start = len(clause) - len(clause.lstrip("¿¡"))
    word = clause[start:].split(" ", 1)[0]
    if word in names or word == "I" or word.startswith("I'"):
        return clause
    return clause[:start] + clause[start : start + 1].lower() + clause[start + 1 :]


def _join(clauses: list[str], conjunction: str, names: set[str]) -> str:
    """'Go.' + 'I ran!' -> 'Go, and I ran!': inner clauses lose their final mark."""
    joined = clauses[0]
    for clause in clauses[1:]:
        joined = f"{joined.rstrip('.!?')}{conjunction}{_lower_first(clause, names)}"
    return joined


def _renamed(en: str, es: str, new_names: dict[str, str]) -> tuple[str, str]:
    """Tom and Mary, where both sides name them, replaced by this pair's made-up names."""
    for old, pattern in _NAMES.items():
        if pattern.search(en) and pattern.search(es):
            en, es = pattern.sub(new_names[old], en), pattern.sub(new_names[old], es)
    return en, es


def synthetic_pairs(n_pairs: int, seed: int = 0) -> Iterator[str]:
    """``n_pairs`` TSV lines ``english<TAB>spanish``, generated one at a time."""
    english, spanish = _bundled_pairs()
    rng = np.random.default_rng(seed)
    n_clauses = rng.choice(_CLAUSES, size=n_pairs, p=_CLAUSE_SHARES)
    picks = rng.integers(0, len(english), size=(n_pairs, max(_CLAUSES)))
    candidates = np.arange(n_pairs) // _PAIRS_PER_NEW_NAME + 1
    draws = (rng.random((n_pairs, len(_NAMES))) * candidates[:, None]).astype(np.int64)
    for i in range(n_pairs):
        new_names = {old: made_up_name(int(k)) for old, k in zip(_NAMES, draws[i], strict=True)}
        clauses = [_renamed(english[r], spanish[r], new_names) for r in picks[i, : n_clauses[i]]]
        names = {*new_names.values(), *_NAMES}  # where only one side named them, Tom and Mary stay
        en = _join([c[0] for c in clauses], ", and ", names)
        es = _join([c[1] for c in clauses], " y ", names)
        yield f"{en}\t{es}\n"


def write_corpus(path: Path, n_pairs: int, seed: int = 0) -> float:
    """Write the corpus to ``path`` (TSV, columns en, es); returns the seconds it took."""
    start = time.perf_counter()
    lines = synthetic_pairs(n_pairs, seed)
    with path.open("w", encoding="utf-8") as out:
        while chunk := list(islice(lines, _CHUNK)):
            out.write("".join(chunk))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    seconds = write_corpus(args.out, args.pairs, args.seed)
    print(f"{args.pairs} pairs written to {args.out} in {seconds:.1f} s")


if __name__ == "__main__":
    main()
