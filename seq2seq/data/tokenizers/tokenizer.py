"""Subword tokenizers for both sides of the translation pair, with the special tokens at their ids.

Byte-level BPE (ByteLevel pre-tokenizer and decoder, NFC normaliser) because it
round-trips text exactly: every string is a byte sequence and all 256 bytes are in
the base vocabulary, so no input (emoji, a character unseen in training) ever maps
to ``<unk>``, and accents, ``¿``/``¡`` and apostrophes come back as they went in.
NFC makes composed and decomposed accents share subwords. ``add_prefix_space`` is
off so the first word is not given a space the decoder would have to strip.

A side may instead be a given tokenizer (:mod:`seq2seq.data.tokenizers.given`): a ``tokenizer.json``
numbered as this one is, or a :class:`SentencePieceSide`. Both are stored with the model: JSON text
for the first kind, the SentencePiece model's bytes (base64 in a checkpoint) for the second.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from itertools import chain
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from seq2seq.config import SENTENCEPIECE, SPECIAL_IDS
from seq2seq.data.tokenizers.sentencepiece_model import SentencePieceSide

PAD_ID, BOS_ID, EOS_ID, UNK_ID = SPECIAL_IDS.pad, SPECIAL_IDS.bos, SPECIAL_IDS.eos, SPECIAL_IDS.unk
_TOKEN_OF_ID = {PAD_ID: "<pad>", BOS_ID: "<s>", EOS_ID: "</s>", UNK_ID: "<unk>"}
SPECIAL_TOKENS = [_TOKEN_OF_ID[i] for i in range(len(_TOKEN_OF_ID))]  # index == id, as BPE training assigns

JSON = "json"  # the format of a side that is a tokenizers.Tokenizer, stored as its JSON
Side = Tokenizer | SentencePieceSide  # one language's tokenizer, special tokens at SPECIAL_IDS
_FILES = {  # format -> file of a shared tokenizer, then of each side's
    JSON: {"shared": "tokenizer.json", "src": "tokenizer.src.json", "tgt": "tokenizer.tgt.json"},
    SENTENCEPIECE: {"shared": "tokenizer.model", "src": "tokenizer.src.model", "tgt": "tokenizer.tgt.model"},
}
FILE_NAMES = frozenset(name for files in _FILES.values() for name in files.values())  # what save() may write


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


def _encode(tokenizer: Side, texts: list[str]) -> list[list[int]]:
    if isinstance(tokenizer, SentencePieceSide):
        return tokenizer.encode_ids(texts)
    # the _fast variant skips character offsets, which nothing here needs
    return [encoding.ids for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]


class TranslationTokenizer:
    """Source and target tokenizers behind one interface; ``src is tgt`` when shared.

    Encoding adds no special tokens: the batching code owns BOS/EOS placement.
    """

    def __init__(self, src: Side, tgt: Side) -> None:
        if isinstance(src, SentencePieceSide) != isinstance(tgt, SentencePieceSide):
            raise ValueError("both sides must be SentencePiece models, or neither")
        self.src = src
        self.tgt = tgt
        self.shared = src is tgt
        self.format = SENTENCEPIECE if isinstance(src, SentencePieceSide) else JSON

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

    def _sides(self) -> dict[str, Side]:
        return {"shared": self.src} if self.shared else {"src": self.src, "tgt": self.tgt}

    def to_dict(self) -> dict[str, str]:
        """Strings, small enough to embed in a checkpoint: JSON, or a SentencePiece model in base64."""
        if self.format == SENTENCEPIECE:
            encoded = {
                name: base64.b64encode(side.proto).decode("ascii") for name, side in self._sides().items()
            }
            return {"format": SENTENCEPIECE, **encoded}
        return {name: side.to_str() for name, side in self._sides().items()}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> TranslationTokenizer:
        if data.get("format") == SENTENCEPIECE:
            sides = {
                name: SentencePieceSide(base64.b64decode(text))
                for name, text in data.items()
                if name != "format"
            }
        else:
            sides = {name: Tokenizer.from_str(text) for name, text in data.items()}
        if "shared" in sides:
            return cls(sides["shared"], sides["shared"])
        return cls(sides["src"], sides["tgt"])

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name, side in self._sides().items():
            path = directory / _FILES[self.format][name]
            if isinstance(side, SentencePieceSide):
                path.write_bytes(side.proto)
            else:
                side.save(str(path))

    @classmethod
    def load(cls, directory: str | Path) -> TranslationTokenizer:
        """The tokenizer :meth:`save` wrote into ``directory``, whichever its format and sharing."""
        directory = Path(directory)
        for form, files in _FILES.items():
            names = ["shared"] if (directory / files["shared"]).exists() else ["src", "tgt"]
            if not all((directory / files[name]).exists() for name in names):
                continue
            if form == SENTENCEPIECE:
                sides = {name: SentencePieceSide((directory / files[name]).read_bytes()) for name in names}
            else:
                sides = {name: Tokenizer.from_file(str(directory / files[name])) for name in names}
            return cls(sides[names[0]], sides[names[-1]])
        raise FileNotFoundError(f"{directory} holds no tokenizer ({', '.join(sorted(FILE_NAMES))})")


def token_labels(tokenizer: Side, ids: list[int]) -> list[str]:
    """Readable label of each subword for plots and tables: specials by name, spaces as '▁',
    and the stored byte-level token for a piece of a multi-byte character."""
    if isinstance(tokenizer, SentencePieceSide):  # its pieces already read so
        return [SPECIAL_TOKENS[i] if i < len(SPECIAL_TOKENS) else tokenizer.id_to_token(i) for i in ids]
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
