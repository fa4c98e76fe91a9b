"""What the routes ask of the model: checked decoding settings, batched translations, attention maps.

Kept apart from the FastAPI wiring so the limits and the payloads read as plain Python. Every
check raises :class:`InputError` with the HTTP status and a one-line message for the client.
The model is a checkpoint or an export (CTranslate2, transformers): its
:class:`~seq2seq.formats.checkpoint.ModelFacts` is what the routes need to know of either; only a
checkpoint's PyTorch model shows its attention.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass

from torch import Tensor

from seq2seq.config import ConfigError, DecodeConfig
from seq2seq.formats.checkpoint import ModelFacts
from seq2seq.inference.attention_views import AttentionKind, translate_with_attention
from seq2seq.inference.targets import TargetError
from seq2seq.inference.translator import TranslatorBase
from seq2seq.serving.batcher import DynamicBatcher
from seq2seq.serving.schemas import (
    MAX_BEAM,
    MAX_TEXTS,
    AttentionResponse,
    Hypothesis,
    InfoResponse,
    TranslationResult,
)

DEFAULT_MAX_INPUT_CHARS = 1000
ATTENTION_DECIMALS = 4  # enough for a heatmap, and keeps the JSON small


class InputError(ValueError):
    """A request the server understood but will not serve: ``status`` 413 or 422."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (the server's command-line options)."""

    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS
    queue_size: int = 256

    @property
    def max_body_bytes(self) -> int:
        """The longest body a valid request can have, and so the most the server reads: MAX_TEXTS
        sentences of max_input_chars characters, each as JSON may escape it (U+1F600 is
        ``\\ud83d\\ude00``, 12 bytes), and room for the other fields."""
        return MAX_TEXTS * (12 * self.max_input_chars + 4) + 1024


class TranslationService:
    """The served model behind the batcher, with the checks and payloads of each route."""

    def __init__(self, facts: ModelFacts, batcher: DynamicBatcher, limits: Limits) -> None:
        self.facts = facts
        self.batcher = batcher
        self.limits = limits

    @property
    def translator(self) -> TranslatorBase:
        return self.batcher.translator

    def decode_cfg_for(self, beam: int | None, nbest: int | None, max_len: int | None) -> DecodeConfig:
        """The checkpoint's decoding config with the request's overrides, or an InputError."""
        try:
            cfg = self.translator.decode_cfg_with(beam, nbest, max_len)
        except ConfigError as err:
            raise InputError(422, str(err)) from err
        max_positions = self.facts.model_config.max_positions
        if max_len is not None and max_len > max_positions:
            raise InputError(
                422, f"max_len ({max_len}) must be <= the model's max_positions ({max_positions})"
            )
        return cfg

    def check_lengths(self, texts: list[str]) -> None:
        limit = self.limits.max_input_chars
        for i, text in enumerate(texts):
            if len(text) > limit:
                raise InputError(413, f"text {i} has {len(text)} characters; this server accepts {limit}")

    def check_targets(
        self, texts: list[str], prefixes: list[str], constraints: list[list[str]], cfg: DecodeConfig
    ) -> None:
        """Refuse, before queueing, a prefix or constraints the search cannot honour (too long, empty,
        no source, greedy search, an export)."""
        if not any(prefix.strip() for prefix in prefixes) and not any(constraints):
            return
        self.check_lengths(prefixes)
        self.check_lengths([phrase for phrases in constraints for phrase in phrases])
        if not self.facts.attention:  # an export: its engine is handed neither
            raise InputError(422, "a target prefix or constraint needs a checkpoint (--ckpt), not an export")
        try:
            sources = self.translator.encode(texts)
            self.translator.encode_targets(sources, cfg, prefixes, constraints)
        except TargetError as err:
            raise InputError(422, str(err)) from err

    async def translate(
        self,
        texts: list[str],
        cfg: DecodeConfig,
        prefixes: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        constraints_in_order: bool = False,
    ) -> list[TranslationResult]:
        """Each text's n-best list; ``prefixes`` ("" for none) are the starts the outputs continue,
        ``constraints`` the phrases they contain (in that order with ``constraints_in_order``)."""
        self.check_lengths(texts)
        prefixes = prefixes or [""] * len(texts)
        constraints = constraints or [[] for _ in texts]
        self.check_targets(texts, prefixes, constraints, cfg)
        results = await asyncio.wrap_future(
            self.batcher.translate(texts, cfg, prefixes, constraints, constraints_in_order)
        )
        return [
            TranslationResult(
                text=nbest[0].text,
                score=nbest[0].score,
                nbest=[Hypothesis(text=t.text, score=t.score) for t in nbest],
            )
            for nbest in results
        ]

    async def attention(self, text: str, cfg: DecodeConfig, prefix: str = "") -> AttentionResponse:
        self.check_lengths([text])
        if not self.facts.attention:
            raise InputError(501, "this server runs an export: attention maps need the checkpoint (--ckpt)")
        if len(getattr(self.translator, "models", ())) > 1:
            raise InputError(501, "this server runs an ensemble: attention maps need one checkpoint (--ckpt)")
        if not text.strip():
            raise InputError(422, "text is blank: there is no attention to show")
        self.check_targets([text], [prefix], [[]], cfg)
        return await asyncio.wrap_future(self.batcher.call(lambda: self._attention(text, cfg, prefix)))

    def _attention(self, text: str, cfg: DecodeConfig, prefix: str) -> AttentionResponse:
        """Runs on the batcher's thread: the model is used by one thread only."""
        translation, attention = translate_with_attention(self.translator, text, cfg, prefix)
        return AttentionResponse(
            translation=translation.text,
            score=translation.score,
            source_tokens=attention.source,
            target_tokens=attention.target,
            output_tokens=attention.output,
            **{kind.value: _rounded(attention.maps[kind]) for kind in AttentionKind},
        )

    def info(self) -> InfoResponse:
        facts = self.facts
        return InfoResponse(
            checkpoint=facts.name,
            engine=self.translator.compute,
            parameters=facts.parameters,
            step=facts.global_step,
            val_bleu=facts.best_bleu,
            src_vocab_size=facts.tokenizer.src_vocab_size,
            tgt_vocab_size=facts.tokenizer.tgt_vocab_size,
            model=asdict(facts.model_config),
            decoding=asdict(self.translator.decode_cfg),
            limits={
                **asdict(self.limits),
                "max_body_bytes": self.limits.max_body_bytes,
                "max_beam": MAX_BEAM,
                "max_texts": MAX_TEXTS,
            },
        )


def _rounded(weights: Tensor) -> list:
    """(L, H, Tq, Tk) -> nested lists of floats with :data:`ATTENTION_DECIMALS` decimals."""
    scale = 10**ATTENTION_DECIMALS
    return (weights.double() * scale).round().div(scale).tolist()
