"""A tokenizer the user gives (``data.tokenizer_file``), checked and numbered as the project numbers
its own: pad, BOS, EOS and unk at ``SPECIAL_IDS``, so the model, decoding and every export treat it
as they treat the learnt BPE.

A Hugging Face ``tokenizer.json`` names no roles, so its special tokens are found by the usual
names (``<pad>`` or ``[PAD]``, ...) and renamed to the project's (``<pad>``, ``<s>``, ``</s>``,
``<unk>``); the ids are renumbered in the file itself, which then loads anywhere ``tokenizers``
does (the transformers export relies on it). A SentencePiece model keeps its file as it is and is
renumbered on the fly (:mod:`seq2seq.data.tokenizers.sentencepiece_model`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from seq2seq.config import HUGGING_FACE, ConfigError, DataConfig
from seq2seq.data.tokenizers.sentencepiece_model import ROLES, SentencePieceSide
from seq2seq.data.tokenizers.tokenizer import SPECIAL_TOKENS, TranslationTokenizer

NAMES = {  # the names a special token goes by in a tokenizer.json, the project's first
    "pad": ("<pad>", "[PAD]"),
    "bos": ("<s>", "<bos>", "[BOS]"),
    "eos": ("</s>", "<eos>", "[EOS]"),
    "unk": ("<unk>", "[UNK]"),
}
_DICT_VOCABULARIES = ("BPE", "WordPiece", "WordLevel")  # model.vocab maps token -> id; Unigram's is a list


def read_given(cfg: DataConfig) -> TranslationTokenizer | None:
    """The tokenizer of ``data.tokenizer_file``, checked; None where the project learns a BPE."""
    if cfg.tokenizer_file is None:
        return None
    files = [cfg.tokenizer_file] if cfg.shared_vocab else list(cfg.tokenizer_file)
    read = hugging_face_side if cfg.tokenizer == HUGGING_FACE else SentencePieceSide
    sides = [read(_bytes_of(file), f"data.tokenizer_file {file}") for file in files]
    return TranslationTokenizer(sides[0], sides[-1])


def _bytes_of(file: str) -> bytes:
    path = Path(file).expanduser()
    try:
        return path.read_bytes()
    except OSError as err:
        raise ConfigError(f"data.tokenizer_file {file}: cannot read it ({err.strerror or err})") from err


def hugging_face_side(text: bytes | str, name: str) -> Tokenizer:
    """The tokenizer.json renumbered so the special tokens come first under the project's names."""
    try:
        data = json.loads(text)
        original = Tokenizer.from_str(json.dumps(data))
    except Exception as err:  # bad JSON, or tokenizers' bare Exception for a file it cannot read
        raise ConfigError(f"{name} is not a Hugging Face tokenizer.json: {str(err).splitlines()[0]}") from err
    vocab = original.get_vocab(with_added_tokens=True)  # token -> id
    found = {role: next((n for n in NAMES[role] if n in vocab), None) for role in ROLES}
    missing = [role for role in ROLES if found[role] is None]
    if missing:
        names = "; ".join(f"{role}: {' or '.join(NAMES[role])}" for role in missing)
        tokens = ", ".join(repr(NAMES[role][0]) for role in missing)
        raise ConfigError(
            f"{name} lacks special tokens ({names}): add them with "
            f"tokenizer.add_special_tokens([{tokens}]) and tokenizer.save(...)"
        )
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ConfigError(f"{name}: its token ids are not 0..{len(vocab) - 1}, one token each")
    model_type = data["model"].get("type")
    if model_type not in (*_DICT_VOCABULARIES, "Unigram"):
        raise ConfigError(
            f"{name}: a {model_type} model is not supported (BPE, WordPiece, WordLevel, Unigram)"
        )
    specials = [vocab[found[role]] for role in ROLES]
    order = specials + sorted(set(vocab.values()) - set(specials))  # new id -> old id
    renamed = {found[role]: SPECIAL_TOKENS[i] for i, role in enumerate(ROLES)}
    _renumber(data, {old: new for new, old in enumerate(order)}, renamed, vocab)
    tokenizer = Tokenizer.from_str(json.dumps(data))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _renumber(data: dict[str, Any], new_id: dict[int, int], renamed: dict[str, str], vocab: dict) -> None:
    """Give every token (added ones included, put in the model's vocabulary) its new id and name, in place.

    The post-processor goes: it holds old ids, and the project places BOS and EOS itself.
    """
    model = data["model"]
    every = {renamed.get(token, token): new_id[i] for token, i in vocab.items()}
    for added in data.get("added_tokens", []):
        added["content"] = renamed.get(added["content"], added["content"])
        added["id"] = new_id[added["id"]]
    if model.get("unk_token") in renamed:
        model["unk_token"] = renamed[model["unk_token"]]
    if model["type"] == "Unigram":
        scores = {piece: score for piece, score in model["vocab"]}
        lowest = min(scores.values(), default=0.0)
        by_id = sorted(every.items(), key=lambda item: item[1])
        inverse = {new: old for old, new in renamed.items()}
        model["vocab"] = [[token, scores.get(inverse.get(token, token), lowest)] for token, _ in by_id]
        if model.get("unk_id") is not None:
            model["unk_id"] = new_id[model["unk_id"]]
    else:
        model["vocab"] = every
    data["post_processor"] = None
    data["padding"] = data["truncation"] = None
