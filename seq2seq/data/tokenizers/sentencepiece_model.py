"""A SentencePiece model as one side of the translation tokenizer.

SentencePiece numbers its pieces its own way (``<unk>`` first by default, no pad unless asked), so
the model's ids are reordered here: its pad, BOS, EOS and unk pieces take the project's special
ids and every other piece keeps its order after them. The methods are those of
``tokenizers.Tokenizer`` that the project calls on one side, so either kind can stand there.
"""

from __future__ import annotations

from seq2seq.config import SPECIAL_IDS, ConfigError

ROLES = sorted(("pad", "bos", "eos", "unk"), key=lambda role: getattr(SPECIAL_IDS, role))  # by project id


def _processor(proto: bytes, name: str):
    try:
        import sentencepiece
    except ImportError as err:
        raise ConfigError(f"{name} is a SentencePiece model: pip install sentencepiece") from err
    try:
        return sentencepiece.SentencePieceProcessor(model_proto=proto)
    except (RuntimeError, TypeError) as err:  # its message is the C++ source line that failed
        raise ConfigError(f"{name} is not a SentencePiece model (it does not parse as one)") from err


class SentencePieceSide:
    """One SentencePiece model, its ids in the project's order (special tokens at ``SPECIAL_IDS``)."""

    def __init__(self, proto: bytes, name: str = "the SentencePiece model") -> None:
        self.proto = proto
        self._sp = _processor(proto, name)
        own = {role: getattr(self._sp, f"{role}_id")() for role in ROLES}
        missing = [role for role in ROLES if own[role] < 0]
        if missing:
            flags = " ".join(f"--{role}_id=N" for role in missing)
            raise ConfigError(
                f"{name} has no {' or '.join(missing)} piece: train it with {flags} "
                "(spm_train gives unk, bos and eos ids 0, 1 and 2 and no pad: add --pad_id=3)"
            )
        specials = [own[role] for role in ROLES]
        size = self._sp.get_piece_size()
        self._theirs = specials + sorted(set(range(size)) - set(specials))  # ours -> theirs
        self._ours = [0] * size  # theirs -> ours
        for ours, theirs in enumerate(self._theirs):
            self._ours[theirs] = ours
        self._identity = self._theirs == list(range(size))

    def encode_ids(self, texts: list[str]) -> list[list[int]]:
        rows = self._sp.encode(texts, out_type=int)
        if self._identity:
            return rows
        ours = self._ours
        return [[ours[i] for i in row] for row in rows]

    def decode_batch(self, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        """Text of each row; SentencePiece drops its control pieces (pad, BOS, EOS) whatever the flag."""
        theirs = self._theirs
        return self._sp.decode([[theirs[i] for i in row] for row in ids])

    def id_to_token(self, i: int) -> str | None:
        return self._sp.id_to_piece(self._theirs[i]) if 0 <= i < len(self._theirs) else None

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return len(self._theirs)
