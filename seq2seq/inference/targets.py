"""Target prefixes and constraint phrases as target ids, checked before a search: each must fit
within its source's output limit and in the target vocabulary, and constraints need beam search.
A bad one is a :class:`TargetError`, one line for the user; inputs are numbered from ``first``."""

from __future__ import annotations

from seq2seq.config import DecodeConfig
from seq2seq.data.tokenizers.tokenizer import UNK_ID, TranslationTokenizer


class TargetError(ValueError):
    """A target prefix the search cannot honour; one line for the user (exit 2, HTTP 422)."""


def prefix_ids(
    tokenizer: TranslationTokenizer,
    prefixes: list[str],
    sources: list[list[int]],
    limits: list[int],
    first: int = 0,
) -> list[list[int]]:
    """Target ids of each cleaned prefix ([] for a blank one), checked against its source's output
    limit."""
    encoded = tokenizer.encode_target(prefixes)
    for i, (ids, source, limit) in enumerate(zip(encoded, sources, limits, strict=True)):
        where = f"input {first + i + 1}"
        if ids and not source:
            raise TargetError(f"{where}: a target prefix needs a source sentence")
        if UNK_ID in ids:
            raise TargetError(f"{where}: the target prefix has characters the target vocabulary lacks")
        if len(ids) > limit:
            raise TargetError(
                f"{where}: the target prefix has {len(ids)} tokens, more than the {limit} its output may "
                "have (raise the output limit: --max-len, max_len)"
            )
    return encoded


def phrase_ids(
    tokenizer: TranslationTokenizer,
    constraints: list[list[str]],
    sources: list[list[int]],
    prefixes: list[list[int]],
    limits: list[int],
    cfg: DecodeConfig,
    first: int = 0,
) -> list[list[list[int]]]:
    """Target ids of each input's cleaned phrases: beam search only, no empty phrase, and room for the
    phrases after the prefix (target ids) within the output limit."""
    if any(constraints) and (cfg.beam_size == 1 or cfg.sampling):
        raise TargetError("constraints need beam search (--beam 2 or more), not greedy search or sampling")
    encoded = []
    for i, (phrases, source, prefix, limit) in enumerate(
        zip(constraints, sources, prefixes, limits, strict=True)
    ):
        where = f"input {first + i + 1}"
        if not all(phrases):
            raise TargetError(f"{where}: a constraint is empty")
        # a phrase as it stands after a space, as terms do inside a sentence (byte-level BPE spells a
        # word's first token differently at the start of a text)
        ids = tokenizer.encode_target([" " + phrase for phrase in phrases]) if phrases else []
        if phrases and not source:
            raise TargetError(f"{where}: a constraint needs a source sentence")
        if any(UNK_ID in phrase for phrase in ids):
            raise TargetError(f"{where}: a constraint has characters the target vocabulary lacks")
        needed = len(prefix) + sum(len(phrase) for phrase in ids)
        if needed > limit:
            raise TargetError(
                f"{where}: its prefix and constraints have {needed} tokens, more than the {limit} its "
                "output may have (raise the output limit: --max-len, max_len)"
            )
        encoded.append(ids)
    return encoded
