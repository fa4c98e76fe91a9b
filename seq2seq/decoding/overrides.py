"""A caller's changes to a model's decoding settings (translate.py's options, a request's fields,
``open_model``'s ``decode``), and the one place they meet :class:`~seq2seq.config.DecodeConfig`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from seq2seq.config import DecodeConfig


@dataclass(frozen=True)
class DecodeOverrides:
    """Each field None (or False) keeps the model's setting."""

    beam: int | None = None  # beam size; 1 is greedy
    nbest: int | None = None  # hypotheses per sentence; None: the model's, at most the beam
    max_len: int | None = None  # at most this many output tokens, whatever the source's length
    sample: bool = False  # draw each token (greedy): temperature, top_k and top_p apply
    temperature: float | None = None  # sampling: None is 1; 0 takes the likeliest token, as greedy does
    top_k: int | None = None  # sampling: draw among the k likeliest; None or 0: the whole vocabulary
    top_p: float | None = None  # sampling: draw from the tokens holding this much probability; None: 1
    capture: bool = False  # the decoder step compiled at fixed shapes (decode.capture)

    def applied_to(self, cfg: DecodeConfig) -> DecodeConfig:
        """``cfg`` with these changes; a bad result is a ConfigError."""
        beam = self.beam if self.beam is not None else 1 if self.sample else cfg.beam_size
        nbest = min(cfg.nbest, beam) if self.nbest is None else self.nbest
        lengths = {} if self.max_len is None else {"max_len_a": 0.0, "max_len_b": self.max_len}
        changed = replace(cfg, beam_size=beam, nbest=nbest, capture=cfg.capture or self.capture, **lengths)
        if not self.sample or self.temperature == 0:  # the limit of sampling as T -> 0: the likeliest token
            return changed
        temperature = 1.0 if self.temperature is None else self.temperature
        return replace(
            changed, sampling=True, temperature=temperature, top_k=self.top_k or 0, top_p=self.top_p or 1.0
        )
