"""Translate with a model exported to transformers (``python -m seq2seq.export --to transformers``)
through ``generate()``, as :class:`~seq2seq.inference.translator.Translator` does.

Same tokenizer, text handling, batching and output (:class:`TranslatorBase`); only :meth:`search`
differs, and it closes the two differences between ``generate()`` and our decoder:

- The maximum length a·src+b is per sentence while ``generate()`` takes one per call, so each
  batch is decoded in groups of equal limit (``max_new_tokens``).
- transformers ranks beams by log-probability / len^alpha, ours by GNMT's ((5 + len) / 6)^alpha.
  So ``generate()`` returns every beam it finished (``num_return_sequences`` = beam size), searching
  until no live beam can win (``early_stopping="never"``, as ours), and each is scored again by one
  teacher-forced pass, with PAD and BOS banned after the softmax as ours bans them, then ranked
  here. Which hypotheses the search keeps on the way is still transformers' own: on a near tie it
  can finish other hypotheses than ours.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import pad_ids
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.decoding.steps import Hypothesis, length_penalty, output_limits, rows_by_limit
from seq2seq.formats.checkpoint import ModelFacts
from seq2seq.formats.export_folder import TRANSFORMERS, ExportError
from seq2seq.inference.translator import TranslatorBase
from seq2seq.machine.hardware import resolve_device


class HFTranslator(TranslatorBase):
    """A transformers export with the project's tokenizer and decoding settings."""

    def __init__(self, directory: str | Path, facts: ModelFacts, device: str, batch_tokens: int) -> None:
        """``facts``: the folder's, as :func:`seq2seq.formats.export_folder.load_bundle` read them."""
        if facts.engine != TRANSFORMERS:
            raise ExportError(f"{directory} is a {facts.engine} export, not a transformers one")
        super().__init__(facts.tokenizer, facts.decode_config, facts.model_config.max_positions, batch_tokens)
        try:
            from transformers import AutoModelForSeq2SeqLM

            import seq2seq.hf  # noqa: F401  (registers seq2seq's own class, for the folders that have it)
        except ImportError as err:
            raise ExportError("translating with a transformers export needs: pip install -e '.[hf]'") from err
        self.device = resolve_device(device)
        # The class is Marian's, Pegasus' or the registered own one: never the code in the folder.
        model = AutoModelForSeq2SeqLM.from_pretrained(directory, trust_remote_code=False)
        self.model = model.to(self.device).eval()

    @property
    def compute(self) -> str:
        return f"transformers {type(self.model).__name__} {str(self.model.dtype).removeprefix('torch.')}"

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    @torch.inference_mode()
    def search(self, sources: list[list[int]], cfg: DecodeConfig) -> list[list[Hypothesis]]:
        """Decode one batch of encoded sources (non-empty, from :meth:`encode`)."""
        src = pad_ids(sources).to(self.device)  # (B, S)
        limits = output_limits(src, cfg, self.max_positions, PAD_ID).tolist()
        results: list[list[Hypothesis]] = [[] for _ in sources]
        for limit, rows in rows_by_limit(limits):
            group = src[rows]
            returned = self._generate(group, limit, cfg)  # (len(rows) * beam, 1 + T): BOS first
            per_row = returned.size(0) // len(rows)
            scores = self._log_probs(group.repeat_interleave(per_row, dim=0), returned)
            for i, row in enumerate(rows):
                hypotheses = [
                    self._hypothesis(returned[j], scores[j], cfg)
                    for j in range(i * per_row, (i + 1) * per_row)
                ]
                hypotheses.sort(key=lambda h: h.score, reverse=True)
                results[row] = hypotheses[: cfg.nbest]
        return results

    def _generate(self, src: Tensor, limit: int, cfg: DecodeConfig) -> Tensor:
        options = {}  # DecodeConfig refuses sampling with a beam, so at most one of these applies
        if cfg.sampling:
            options = {"temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p}
        elif cfg.beam_size > 1:  # stop only when no live beam can win, as ours; the ranking happens here
            options = {"length_penalty": cfg.length_penalty, "early_stopping": "never"}
        return self.model.generate(
            input_ids=src,
            attention_mask=src != PAD_ID,
            max_new_tokens=limit,
            min_new_tokens=cfg.min_len,
            num_beams=cfg.beam_size,
            num_return_sequences=cfg.beam_size,
            do_sample=cfg.sampling,
            **options,
        )

    def logits(self, src: Tensor, decoder_in: Tensor) -> Tensor:
        """The model's logits teacher-forced on ``decoder_in``, pads masked on both sides: (N, T, V)."""
        return self.model(
            input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=decoder_in,
            decoder_attention_mask=decoder_in != PAD_ID,
        ).logits  # fmt: skip

    def _log_probs(self, src: Tensor, returned: Tensor) -> Tensor:
        """Log-probability of each returned token under the model, PAD and BOS banned after the softmax;
        (N, T) for the T tokens after BOS."""
        logprobs = self.logits(src, returned[:, :-1]).float().log_softmax(dim=-1)  # (N, T, V)
        return logprobs.gather(-1, returned[:, 1:, None])[..., 0]

    def _hypothesis(self, tokens: Tensor, logprobs: Tensor, cfg: DecodeConfig) -> Hypothesis:
        """Ours from one returned row: ids without BOS/EOS, score over the length counted with EOS."""
        ids = tokens[1:].tolist()
        if tokens[0].item() != BOS_ID:
            raise ExportError("generate() did not start from BOS: generation_config.json was changed")
        length = ids.index(EOS_ID) + 1 if EOS_ID in ids else len(ids) - ids.count(PAD_ID)
        total = logprobs[:length].sum().item()
        return Hypothesis(
            ids[: length - 1] if EOS_ID in ids else ids[:length],
            total / length_penalty(length, cfg.length_penalty),
        )
