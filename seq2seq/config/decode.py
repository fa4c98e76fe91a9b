"""The decode group's schema: how translations are searched for, and which keys only sampling reads."""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.config.errors import ConfigError, finite, positive


@dataclass
class DecodeConfig:
    """How translations are searched for."""

    beam_size: int = 1  # 1 = greedy
    length_penalty: float = 0.6  # GNMT alpha; 0 = raw log-probability
    nbest: int = 1  # hypotheses returned per sentence
    max_len_a: float = 1.5  # max output length = a * source length + b
    max_len_b: int = 10  # the b of max_len_a: tokens allowed beyond a * source length
    min_len: int = 0  # EOS is forbidden before this many tokens
    sampling: bool = False  # greedy only: draw each token from the softmax instead of taking the argmax
    temperature: float = 1.0  # sampling: softmax temperature (< 1 sharper, > 1 flatter)
    top_k: int = 0  # sampling: draw among the k likeliest tokens; 0 = the whole vocabulary
    top_p: float = 1.0  # sampling: draw from the likeliest tokens holding this much probability; 1 = all
    capture: bool = False  # the decoder step compiled at fixed shapes (CUDA graphs on a GPU)

    def __post_init__(self) -> None:
        finite("decode", self)
        positive("decode.beam_size", self.beam_size)
        positive("decode.nbest", self.nbest)
        positive("decode.temperature", self.temperature)
        for name in ("max_len_a", "max_len_b", "min_len", "top_k"):
            if getattr(self, name) < 0:
                raise ConfigError(f"decode.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"decode.top_p must be in (0, 1], got {self.top_p}")
        if self.sampling and self.beam_size > 1:
            raise ConfigError(f"decode.sampling needs decode.beam_size=1, got {self.beam_size}")
        if self.nbest > self.beam_size:
            raise ConfigError(
                f"decode.nbest ({self.nbest}) must be <= beam ({self.beam_size}): "
                "the n-best list comes from the beam (decode.beam_size)"
            )
        if self.length_penalty < 0:
            raise ConfigError(f"decode.length_penalty must be >= 0, got {self.length_penalty}")


SAMPLING_KEYS = ("temperature", "top_k", "top_p")  # read only when sampling; their defaults change nothing
