"""Translate with a model exported to CTranslate2 (``python -m seq2seq.export``) as :class:`Translator` does.

Same tokenizer, text handling, batching and output (:class:`TranslatorBase`); only :meth:`search`
differs. Our decoding settings map onto ``ctranslate2.Translator.translate_batch`` like this:

- beam size, min length (CTranslate2's own default is 1, ours 0), temperature, top-k and top-p map
  one to one; CTranslate2 filters top-k, temperature, then top-p, as :mod:`seq2seq.decoding.sampling`.
  Without sampling, ``sampling_topk=1`` takes the argmax; with it, 0 means the whole vocabulary.
- PAD and BOS are suppressed, as :func:`seq2seq.decoding.steps.next_log_probs` bans them.
- The maximum length a·src+b is per sentence while CTranslate2 takes one per call, so each batch is
  decoded in groups of equal limit.
- Scores: CTranslate2 returns the summed log-probability of the tokens (EOS included when it asked
  for the end token), which is divided here by our GNMT penalty with the length counted as ours.
  Its own penalty, len^alpha, is switched off for greedy search; for beam search it is 1e-12, not 0,
  because 0 turns on an early exit that stops a sentence at its first finished hypothesis, while
  ours collects beam-size finished hypotheses first; len^1e-12 is within 1e-11 of 1. One difference
  stays: CTranslate2 bans tokens before its softmax, renormalising over the rest, and we ban them
  after ours, so its scores are higher by -log(1 - p(banned tokens)) per step. For a trained model
  that is tiny, but on a near tie between beams it can choose differently.
- Sampling draws from CTranslate2's own generator: seeded with :meth:`CT2Translator.seed`, a run
  repeats, but the draws differ from PyTorch's for the same seed.

CTranslate2 counts the GPUs the driver shows, but its CUDA libraries (built for one CUDA major
version) load only when a model does or at its first translation. So a GPU is tried with one token
before it is used: "auto" decodes on the CPU, with a warning, where CTranslate2 cannot run on the GPU,
and "cuda" stops with a one-line error.
"""

from __future__ import annotations

import logging
from pathlib import Path

import ctranslate2

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import pad_ids
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS
from seq2seq.decoding.steps import Hypothesis, length_penalty, output_limits, rows_by_limit
from seq2seq.formats.checkpoint import ModelFacts
from seq2seq.formats.export_folder import ExportError
from seq2seq.inference.translator import TranslatorBase
from seq2seq.machine.hardware import DeviceError, resolve_ct2_device

log = logging.getLogger(__name__)

BEAM_LENGTH_PENALTY = 1e-12  # see the module docstring: nonzero, yet leaves the scores as they are


class CT2Translator(TranslatorBase):
    """An exported model in a ``ctranslate2.Translator``, with the project's tokenizer and settings."""

    def __init__(
        self,
        directory: str | Path,
        facts: ModelFacts,
        device: str,
        batch_tokens: int,
        compute_type: str = "default",
        threads: int = 0,
    ) -> None:
        """``facts``: the folder's, as :func:`seq2seq.formats.export_folder.load_bundle` read them.
        ``compute_type`` "default" computes in the exported weight type where the device supports
        it; ``threads`` 0 lets CTranslate2 choose."""
        super().__init__(facts.tokenizer, facts.decode_config, facts.model_config.max_positions, batch_tokens)
        self.device = resolve_ct2_device(device)
        self._engine_args = {"device": self.device, "compute_type": compute_type, "intra_threads": threads}
        self.directory = Path(directory)
        tokenizer = facts.tokenizer
        self._source_tokens = [tokenizer.src.id_to_token(i) for i in range(tokenizer.src_vocab_size)]
        self._target_ids = {tokenizer.tgt.id_to_token(i): i for i in range(tokenizer.tgt_vocab_size)}
        self.engine = self._load_engine() if self.device == "cpu" else self._load_on_gpu(device == "auto")

    def _load_on_gpu(self, may_fall_back: bool) -> ctranslate2.Translator:
        """The engine on the GPU, tried with one token; on the CPU instead where ``may_fall_back``."""
        try:
            engine = ctranslate2.Translator(str(self.directory), **self._engine_args)
            engine.translate_batch([[self._source_tokens[EOS_ID]]], max_decoding_length=1)
            return engine
        except RuntimeError as err:
            reason = str(err).splitlines()[0]
        if not may_fall_back:
            raise DeviceError(f"device 'cuda': CTranslate2 cannot run on this GPU ({reason}); use 'cpu'")
        log.warning("CTranslate2 cannot run on this GPU (%s): decoding on the CPU", reason)
        self.device = self._engine_args["device"] = "cpu"
        return self._load_engine()

    def _load_engine(self) -> ctranslate2.Translator:
        try:
            return ctranslate2.Translator(str(self.directory), **self._engine_args)
        except (RuntimeError, ValueError) as err:  # a missing or damaged model.bin, an unknown type
            raise ExportError(
                f"{self.directory}: CTranslate2 cannot load it: {str(err).splitlines()[0]}"
            ) from err

    def seed(self, seed: int) -> None:
        """Seed sampling. CTranslate2 seeds a worker thread's generator when the thread starts, so the
        engine is loaded again (milliseconds for a model this size) to start from the new seed."""
        ctranslate2.set_random_seed(seed)
        self.engine = self._load_engine()

    @property
    def compute(self) -> str:
        return f"CTranslate2 {self.engine.compute_type}"

    def search(self, sources: list[list[int]], cfg: DecodeConfig) -> list[list[Hypothesis]]:
        """Decode one batch of encoded sources (non-empty, from :meth:`encode`)."""
        limits = output_limits(pad_ids(sources), cfg, self.max_positions, PAD_ID).tolist()
        options = self._options(cfg)
        results: list[list[Hypothesis]] = [[] for _ in sources]
        for limit, rows in rows_by_limit(limits):
            batch = [[self._source_tokens[i] for i in sources[row]] for row in rows]
            outputs = self.engine.translate_batch(batch, max_decoding_length=limit, **options)
            for row, output in zip(rows, outputs, strict=True):
                results[row] = self._hypotheses(output, cfg)
        return results

    def _options(self, cfg: DecodeConfig) -> dict:
        """``translate_batch`` keyword arguments for ``cfg`` (see the module docstring)."""
        vocab = len(self._target_ids)
        return {
            "beam_size": cfg.beam_size,
            "num_hypotheses": cfg.beam_size,  # every finished one: the GNMT ranking happens here
            "length_penalty": BEAM_LENGTH_PENALTY if cfg.beam_size > 1 else 0.0,
            "min_decoding_length": cfg.min_len,
            "suppress_sequences": [[SPECIAL_TOKENS[PAD_ID]], [SPECIAL_TOKENS[BOS_ID]]],
            "return_scores": True,
            "return_end_token": True,
            "max_input_length": 0,  # inputs are already cut to the model's positions
            "sampling_topk": (cfg.top_k if 0 < cfg.top_k < vocab else 0) if cfg.sampling else 1,
            "sampling_topp": cfg.top_p if cfg.sampling else 1.0,
            "sampling_temperature": cfg.temperature if cfg.sampling else 1.0,
        }

    def _hypotheses(self, output: ctranslate2.TranslationResult, cfg: DecodeConfig) -> list[Hypothesis]:
        """CTranslate2's hypotheses as ours: ids without EOS, GNMT-normalised scores, best first."""
        hypotheses = []
        for tokens, score in zip(output.hypotheses, output.scores, strict=True):
            ids = [self._target_ids[token] for token in tokens]
            normalised = score / length_penalty(len(ids), cfg.length_penalty)  # length counts EOS, as ours
            hypotheses.append(Hypothesis(ids[:-1] if ids and ids[-1] == EOS_ID else ids, normalised))
        hypotheses.sort(key=lambda h: h.score, reverse=True)
        return hypotheses[: cfg.nbest]
