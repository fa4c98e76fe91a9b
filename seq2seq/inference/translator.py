"""Strings in, translations out: the one path shared by the CLI, evaluation and validation.

Inputs are stripped, tokenized and given EOS, sorted by length into token-budget batches,
decoded by a backend, and returned in input order. Streams are read in chunks of
:data:`CHUNK_LINES` lines, so a huge file never sits in memory. Empty and whitespace-only
inputs translate to "" and line breaks in outputs become spaces, so outputs stay aligned with
inputs line for line. An input longer than the model's positional table is cut to fit, with a
warning the first time.

:class:`TranslatorBase` is that text side, shared by every backend. :class:`Translator` decodes
with the PyTorch model through :func:`seq2seq.decoding.generate`;
:class:`seq2seq.inference.ct2_translator.CT2Translator` and
:class:`seq2seq.inference.hf_translator.HFTranslator` with an exported model. Open one with
:func:`seq2seq.inference.backends.open_model`.
"""

from __future__ import annotations

import copy
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

import numpy as np
import torch

from seq2seq.config import DataConfig, DecodeConfig
from seq2seq.data.batching import pack, pad_ids
from seq2seq.data.tokenizers.tokenizer import EOS_ID, TranslationTokenizer
from seq2seq.decoding import Hypothesis, generate
from seq2seq.decoding.captured_steps import Decoders
from seq2seq.decoding.overrides import DecodeOverrides
from seq2seq.decoding.scorers import Models, members
from seq2seq.decoding.shortlist import Shortlist
from seq2seq.decoding.steps import limits_of_lengths
from seq2seq.inference.targets import TargetError, phrase_ids, prefix_ids
from seq2seq.machine.hardware import DeviceError
from seq2seq.model import Transformer
from seq2seq.model.int8 import INT8, quantize_decoder

log = logging.getLogger(__name__)

DEFAULT_BATCH_TOKENS = DataConfig.eval_max_tokens  # padded source tokens per batch, as in validation
CHUNK_LINES = 10_000  # lines read, sorted and decoded together when streaming


@dataclass(frozen=True)
class Translation:
    """One hypothesis as text, with its length-normalised log-probability."""

    text: str
    score: float


def clean(text: str) -> str:
    """Stripped, with lone surrogates (undecodable bytes read with surrogateescape) replaced: they
    cannot reach the tokenizer."""
    return text.encode("utf-8", "replace").decode("utf-8").strip()


def one_line(text: str) -> str:
    """Byte-level BPE can emit line breaks; one output line per input line needs them gone."""
    return text.replace("\r", " ").replace("\n", " ")


def token_budget_batches(sources: list[list[int]], batch_tokens: int) -> list[np.ndarray]:
    """Indices of the non-empty sources, sorted by length (which keeps padding low) and packed so that
    size × longest <= batch_tokens."""
    lengths = np.array([len(ids) for ids in sources], dtype=np.int64)
    non_empty = np.flatnonzero(lengths)
    return pack(non_empty[np.argsort(lengths[non_empty], kind="stable")], lengths, batch_tokens)


class TranslatorBase(ABC):
    """The text side of translation, shared by every backend: clean, truncate, batch, decode, reorder.

    A backend implements :meth:`search` (encoded sources in, hypotheses out) and :meth:`seed`.
    """

    def __init__(
        self,
        tokenizer: TranslationTokenizer,
        decode_cfg: DecodeConfig,
        max_positions: int,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> None:
        self.tokenizer = tokenizer
        self.decode_cfg = decode_cfg
        self.max_positions = max_positions
        self.batch_tokens = batch_tokens
        self._warned_truncation = False

    @abstractmethod
    def search(self, sources: list[list[int]], cfg: DecodeConfig) -> list[list[Hypothesis]]:
        """Decode one batch of encoded sources (non-empty, from :meth:`encode`)."""

    @abstractmethod
    def seed(self, seed: int) -> None:
        """Seed the random draws of sampling, so that a run can be repeated."""

    @property
    @abstractmethod
    def compute(self) -> str:
        """Engine and number type, e.g. "PyTorch bfloat16": reports that compare two decoders
        state it for each side, since bf16 rounding alone can change a near-tie's output."""

    def decode_cfg_with(
        self, beam: int | None = None, nbest: int | None = None, max_len: int | None = None
    ) -> DecodeConfig:
        """The decoding config with these overrides (see :class:`DecodeOverrides`)."""
        return DecodeOverrides(beam, nbest, max_len).applied_to(self.decode_cfg)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Source ids + EOS per text, cut to the model's max positions; [] for a blank text."""
        stripped = [clean(text) for text in texts]
        limit = self.max_positions - 1  # room for EOS
        encoded = []
        for ids in self.tokenizer.encode_source(stripped):
            if len(ids) > limit and not self._warned_truncation:
                log.warning(
                    "input of %d tokens cut to model.max_positions=%d (warned once)", len(ids) + 1, limit + 1
                )
                self._warned_truncation = True
            encoded.append([*ids[:limit], EOS_ID] if ids else [])
        return encoded

    def search_prefixed(
        self,
        sources: list[list[int]],
        cfg: DecodeConfig,
        prefixes: list[list[int]],
        constraints: list[list[list[int]]] | None = None,
        constraints_in_order: bool = False,
    ) -> list[list[Hypothesis]]:
        """:meth:`search` with each output starting with its prefix (target ids; [] for none) and
        containing each phrase of its ``constraints`` (in their order when ``constraints_in_order``)."""
        raise TargetError("a target prefix or constraint needs a checkpoint (--ckpt), not an export")

    def encode_targets(
        self,
        sources: list[list[int]],
        cfg: DecodeConfig,
        prefixes: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        first: int = 0,
    ) -> tuple[list[list[int]], list[list[list[int]]]]:
        """Target ids of each input's prefix and constraint phrases ([] for none), cleaned and checked
        against its source's output limit (:mod:`seq2seq.inference.targets`); ``first`` numbers the
        inputs in messages. A bad one is a :class:`TargetError`."""
        lengths = torch.tensor([len(source) for source in sources], dtype=torch.long)
        limits = limits_of_lengths(lengths, cfg, self.max_positions).tolist()
        forced: list[list[int]] = [[] for _ in sources]
        if prefixes is not None:
            starts = [clean(prefix) for prefix in prefixes]
            forced = prefix_ids(self.tokenizer, starts, sources, limits, first)
        if constraints is None:
            return forced, [[] for _ in sources]
        cleaned = [[clean(phrase) for phrase in phrases] for phrases in constraints]
        return forced, phrase_ids(self.tokenizer, cleaned, sources, forced, limits, cfg, first)

    def _translate_chunk(
        self,
        texts: list[str],
        cfg: DecodeConfig,
        prefixes: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        first: int = 0,
        constraints_in_order: bool = False,
    ) -> list[list[Translation]]:
        sources = self.encode(texts)
        forced, phrases = self.encode_targets(sources, cfg, prefixes, constraints, first)
        results = [[Translation("", 0.0)] for _ in texts]  # what blank inputs keep
        for batch in token_budget_batches(sources, self.batch_tokens):
            rows = batch.tolist()
            batch_sources, batch_prefixes = [sources[i] for i in rows], [forced[i] for i in rows]
            batch_phrases = [phrases[i] for i in rows]
            if any(batch_prefixes) or any(batch_phrases):
                hypotheses = self.search_prefixed(
                    batch_sources, cfg, batch_prefixes, batch_phrases, constraints_in_order
                )
            else:
                hypotheses = self.search(batch_sources, cfg)
            texts_out = iter(self.tokenizer.decode_target([h.tokens for hyps in hypotheses for h in hyps]))
            for i, hyps in zip(rows, hypotheses, strict=True):
                results[i] = [Translation(one_line(next(texts_out)), h.score) for h in hyps]
        return results

    def translate(
        self,
        texts: Iterable[str],
        cfg: DecodeConfig | None = None,
        prefixes: Iterable[str] | None = None,
        constraints: Iterable[list[str]] | None = None,
        constraints_in_order: bool = False,
    ) -> Iterator[list[Translation]]:
        """Lazily translate ``texts``, yielding each one's n-best list (best first) in input order.

        ``cfg`` defaults to the translator's own decoding config (see :meth:`decode_cfg_with`).
        ``prefixes``, one per text ("" for none), are the start each output must continue; scores
        cover the whole output. ``constraints``, one list per text, are target phrases each output
        must contain (beam search only), in the order given when ``constraints_in_order``. Input is
        consumed :data:`CHUNK_LINES` at a time, so an endless stream works.
        """
        cfg = cfg or self.decode_cfg
        iterator = iter(texts)
        starts = None if prefixes is None else iter(prefixes)
        phrases = None if constraints is None else iter(constraints)
        first = 0
        while chunk := list(islice(iterator, CHUNK_LINES)):
            chunk_prefixes = None if starts is None else list(islice(starts, len(chunk)))
            chunk_phrases = None if phrases is None else list(islice(phrases, len(chunk)))
            yield from self._translate_chunk(
                chunk, cfg, chunk_prefixes, chunk_phrases, first, constraints_in_order
            )
            first += len(chunk)


class Translator(TranslatorBase):
    """A PyTorch model (or an ensemble: several sharing one tokenizer), its tokenizer and decoding
    settings, ready to turn strings into translations.

    The search runs in ``dtype`` with the weights converted to it once, here, on a copy when the
    model is in another dtype (the model given stays as it is: validation decodes a training run's
    weights). Autocast instead would cast every weight again at every decoding step. ``dtype``
    :data:`~seq2seq.model.int8.INT8` (a CPU only) puts the decoder's and the output projection's
    linear layers in int8, activations staying float32. With a ``shortlist``, each batch's output
    is restricted to its candidate types. An ensemble averages its members' log-probabilities
    (:mod:`seq2seq.decoding.scorers`); :attr:`model` is its first member.
    """

    def __init__(
        self,
        model: Models,
        tokenizer: TranslationTokenizer,
        decode_cfg: DecodeConfig,
        device: str | torch.device = "cpu",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        dtype: torch.dtype = torch.float32,
        shortlist: Shortlist | None = None,
    ) -> None:
        models = members(model)
        super().__init__(tokenizer, decode_cfg, min(m.cfg.max_positions for m in models), batch_tokens)
        self.device = torch.device(device)
        self.dtype = dtype
        self.shortlist = shortlist
        if dtype == INT8 and self.device.type != "cpu":
            raise DeviceError(f"int8 weights decode on a CPU only, not on {self.device.type}")
        self.models = [self._prepared(m) for m in models]
        self.model = self.models[0]
        self.captured: Decoders = {}  # decode.capture's compiled steps and buffers, kept for each batch

    def _prepared(self, model: Transformer) -> Transformer:
        """``model`` in the search's dtype, on its device, in eval mode (a copy if it must change)."""
        if self.dtype == INT8:
            model = quantize_decoder(copy.deepcopy(model).float())
        elif model.generator.weight.dtype != self.dtype:
            model = copy.deepcopy(model).to(dtype=self.dtype)
        return model.to(self.device).eval()

    @property
    def compute(self) -> str:
        number = (
            "int8 weights, float32 activations"
            if self.dtype == INT8
            else str(self.dtype).removeprefix("torch.")
        )
        ensemble = f", ensemble of {len(self.models)}" if len(self.models) > 1 else ""
        return f"PyTorch {number}" + (", shortlist" if self.shortlist is not None else "") + ensemble

    def search(self, sources: list[list[int]], cfg: DecodeConfig) -> list[list[Hypothesis]]:
        """Decode one batch of encoded sources (non-empty, from :meth:`encode`)."""
        return self.search_prefixed(sources, cfg, None)

    def search_prefixed(
        self,
        sources: list[list[int]],
        cfg: DecodeConfig,
        prefixes: list[list[int]] | None,
        constraints: list[list[list[int]]] | None = None,
        constraints_in_order: bool = False,
    ) -> list[list[Hypothesis]]:
        candidates = None
        if self.shortlist is not None:
            candidates = self.shortlist.candidates(sources, self.model.special_ids).to(self.device)
        models = self.model if len(self.models) == 1 else self.models
        src = pad_ids(sources).to(self.device)
        return generate(
            models, src, cfg, candidates, prefixes, constraints,
            constraints_in_order=constraints_in_order, decoders=self.captured,
        )  # fmt: skip

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)
