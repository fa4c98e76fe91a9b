"""JSON bodies of the HTTP API: what FastAPI validates requests against and documents at /docs.

Unknown fields are rejected and types are strict (``"beam": "3"`` or ``true`` is an error, not a
3), so a typo in a client fails loudly with a 422 instead of being ignored.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_BEAM = 16  # largest beam (and n-best list) a request may ask for
MAX_TEXTS = 64  # sentences in one /translate request; more belong in several requests or translate.py

Beam = Annotated[int, Field(ge=1, le=MAX_BEAM, description=f"beam size, 1 (greedy) to {MAX_BEAM}")]
MaxLen = Annotated[int, Field(ge=1, description="at most this many output tokens (default: a·source+b)")]
Weights = list[list[list[list[float]]]]  # (layers, heads, query tokens, key tokens)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TranslateRequest(_Strict):
    text: str | list[str] = Field(
        description=f"one sentence, or a list of 1 to {MAX_TEXTS} sentences", examples=["How are you?"]
    )
    beam: Beam | None = Field(
        None, description=f"beam size, 1 (greedy) to {MAX_BEAM}; default: the checkpoint's"
    )
    nbest: int | None = Field(None, ge=1, le=MAX_BEAM, description="hypotheses per sentence, at most beam")
    max_len: MaxLen | None = None
    prefix: str | list[str] | None = Field(
        None,
        description="the start each translation must continue (tokens forced, then searched on; scores "
        "cover the whole output): a string for one text, a list as long as text's for several",
        examples=["¿Cómo"],
    )
    constraints: list[str] | list[list[str]] | None = Field(
        None,
        description="target phrases each translation must contain (beam search): a list of phrases for "
        "one text, a list of such lists for several",
    )
    constraints_in_order: bool = Field(False, description="the phrases appear in the order given")

    @field_validator("text", "prefix", mode="before")
    @classmethod
    def _sentences(cls, value: object) -> object:
        """One clear message instead of one per member of the union."""
        if value is None or isinstance(value, str):
            return value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError("must be a string or a list of strings")
        if not 1 <= len(value) <= MAX_TEXTS:
            raise ValueError(f"must hold 1 to {MAX_TEXTS} sentences, got {len(value)}")
        return value

    def texts_and_targets(self) -> tuple[list[str], list[str], list[list[str]]]:
        """The sentences, the prefix of each ("" for none) and its phrases; a prefix or constraints
        shaped unlike text is a ValueError."""
        one = isinstance(self.text, str)
        texts = [self.text] if one else self.text
        prefixes = [""] * len(texts) if self.prefix is None else self.prefix
        if isinstance(prefixes, str):
            prefixes = [prefixes]
        if self.prefix is not None and (isinstance(self.prefix, str) != one or len(prefixes) != len(texts)):
            raise ValueError("prefix must be shaped as text: a string for a string, a list as long as text's")
        phrases, shaped = [[] for _ in texts], True
        if self.constraints is not None and one:
            phrases, shaped = [self.constraints], all(isinstance(p, str) for p in self.constraints)
        elif self.constraints is not None:
            phrases = self.constraints
            shaped = all(isinstance(p, list) for p in phrases) and len(phrases) == len(texts)
        if not shaped:
            raise ValueError(
                "constraints must be a list of phrases for one text, a list of such lists as long as text's"
            )
        return texts, prefixes, phrases


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="length-normalised log-probability")


class TranslationResult(BaseModel):
    text: str = Field(description="the best translation")
    score: float
    nbest: list[Hypothesis] = Field(description="the n-best list, best first (its first entry is text/score)")


class TranslateResponse(BaseModel):
    translations: list[TranslationResult] = Field(description="one per input sentence, in input order")


class AttentionRequest(_Strict):
    text: str = Field(min_length=1, examples=["I like coffee."])
    beam: Beam | None = None
    max_len: MaxLen | None = None
    prefix: str = Field("", description="the start the translation must continue, as /translate's")


class AttentionResponse(BaseModel):
    translation: str
    score: float
    source_tokens: list[str] = Field(
        description="source subwords, </s> last: encoder rows, encoder and cross columns"
    )
    target_tokens: list[str] = Field(description="decoder inputs, <s> first: decoder self-attention columns")
    output_tokens: list[str] = Field(description="the token each decoder position predicts: decoder rows")
    encoder_self: Weights = Field(description="[layer][head][source][source]")
    decoder_self: Weights = Field(description="[layer][head][output][target], causal")
    cross: Weights = Field(description="[layer][head][output][source]")


class ErrorResponse(BaseModel):
    error: str = Field(description="one line saying what was wrong")


class HealthResponse(BaseModel):
    status: str
    queue_depth: int


class InfoResponse(BaseModel):
    checkpoint: str = Field(description="the checkpoint file or export folder served")
    engine: str = Field(description='what decodes, in which number type, e.g. "PyTorch float32"')
    parameters: int
    step: int | None = Field(description="optimiser steps the checkpoint was trained for")
    val_bleu: float | None = Field(description="its best validation BLEU")
    src_vocab_size: int
    tgt_vocab_size: int
    model: dict = Field(description="the model config stored in the checkpoint")
    decoding: dict = Field(description="default decoding settings (the checkpoint's validation ones)")
    limits: dict = Field(
        description="what this server accepts: max_input_chars, max_body_bytes, max_beam, max_texts, "
        "queue_size"
    )
