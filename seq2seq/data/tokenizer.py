"""Subword tokenizers for both sides of the translation pair, with the special tokens at their ids.

Byte-level BPE (ByteLevel pre-tokenizer and decoder, NFC normaliser) because it
round-trips text exactly: every string is a byte sequence and all 256 bytes are in
the base vocabulary, so no input (emoji, a character unseen in training) ever maps
to ``<unk>``, and accents, ``¿``/``¡`` and apostrophes come back as they went in.
NFC makes composed and decomposed accents share subwords. ``add_prefix_space`` is
off so the first word is not given a space the decoder would have to strip.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from itertools import chain
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from seq2seq.config import SPECIAL_IDS

PAD_ID, BOS_ID, EOS_ID, UNK_ID = SPECIAL_IDS.pad, SPECIAL_IDS.bos, SPECIAL_IDS.eos, SPECIAL_IDS.unk
_TOKEN_OF_ID = {PAD_ID: "<pad>", BOS_ID: "<s>", EOS_ID: "</s>", UNK_ID: "<unk>"}
SPECIAL_TOKENS = [_TOKEN_OF_ID[i] for i in range(len(_TOKEN_OF_ID))]  # index == id, as BPE training assigns

_SHARED_FILE = "tokenizer.json"
_SIDE_FILES = {"src": "tokenizer.src.json", "tgt": "tokenizer.tgt.json"}


def _new_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _train_one(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    tokenizer = _new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected_id:
            raise RuntimeError(f"special token {token} did not get id {expected_id}")
    return tokenizer


def _encode(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    # the _fast variant skips character offsets, which nothing here needs
    return [encoding.ids for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]


class TranslationTokenizer:
    """Source and target tokenizers behind one interface; ``src is tgt`` when shared.

    Encoding adds no special tokens: the batching code owns BOS/EOS placement.
    """

    def __init__(self, src: Tokenizer, tgt: Tokenizer) -> None:
        self.src = src
        self.tgt = tgt
        self.shared = src is tgt

    @classmethod
    def train(
        cls, sources: Iterable[str], targets: Iterable[str], vocab_size: int, shared: bool
    ) -> TranslationTokenizer:
        """Learn BPE merges from streamed text; ``vocab_size`` applies per tokenizer."""
        if shared:
            tokenizer = _train_one(chain(sources, targets), vocab_size)
            return cls(tokenizer, tokenizer)
        return cls(_train_one(sources, vocab_size), _train_one(targets, vocab_size))

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_vocab_size(with_added_tokens=True)

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_vocab_size(with_added_tokens=True)

    def encode_source(self, texts: list[str]) -> list[list[int]]:
        return _encode(self.src, texts)

    def encode_target(self, texts: list[str]) -> list[list[int]]:
        return _encode(self.tgt, texts)

    def decode_source(self, ids: list[list[int]]) -> list[str]:
        return self.src.decode_batch(ids, skip_special_tokens=True)

    def decode_target(self, ids: list[list[int]]) -> list[str]:
        return self.tgt.decode_batch(ids, skip_special_tokens=True)

    def to_dict(self) -> dict[str, str]:
        """JSON strings, small enough to embed in a checkpoint."""
        if self.shared:
            return {"shared": self.src.to_str()}
        return {"src": self.src.to_str(), "tgt": self.tgt.to_str()}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> TranslationTokenizer:
        if "shared" in data:
            tokenizer = Tokenizer.from_str(data["shared"])
            return cls(tokenizer, tokenizer)
        return cls(Tokenizer.from_str(data["src"]), Tokenizer.from_str(data["tgt"]))

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.shared:
            self.src.save(str(directory / _SHARED_FILE))
            return
        self.src.save(str(directory / _SIDE_FILES["src"]))
        self.tgt.save(str(directory / _SIDE_FILES["tgt"]))

    @classmethod
    def load(cls, directory: str | Path) -> TranslationTokenizer:
        directory = Path(directory)
        shared_file = directory / _SHARED_FILE
        if shared_file.exists():
            return cls.from_dict({"shared": shared_file.read_text(encoding="utf-8")})
        texts = {side: (directory / name).read_text(encoding="utf-8") for side, name in _SIDE_FILES.items()}
        return cls.from_dict(texts)


def token_labels(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    """Readable label of each subword for plots and tables: specials by name, spaces as '▁',
    and the stored byte-level token for a piece of a multi-byte character."""
    texts = tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)
    labels = []
    for i, text in zip(ids, texts, strict=True):
        if i < len(SPECIAL_TOKENS):
            labels.append(SPECIAL_TOKENS[i])
        elif "\ufffd" in text:
            labels.append(tokenizer.id_to_token(i))
        else:
            labels.append(text.replace(" ", "▁"))
    return labels


def config_key(vocab_size: int, shared: bool) -> str:
    """Stable description of everything that changes the trained tokenizer."""
    return json.dumps(
        {"kind": "byte-bpe-nfc", "vocab_size": vocab_size, "shared": shared, "specials": SPECIAL_TOKENS}
    )
