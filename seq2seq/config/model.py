"""The model group's schema, and the ids of the special tokens that the tokenizer, the model and
decoding share."""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.config.errors import ConfigError, finite, positive, probability


@dataclass(frozen=True)
class SpecialIds:
    """Ids of the special tokens. The tokenizer gives its special tokens these ids; the model and
    decoding read them from the model, so decoding never needs the data stage."""

    pad: int = 0
    bos: int = 1
    eos: int = 2
    unk: int = 3


SPECIAL_IDS = SpecialIds()
RELU, GELU, SWIGLU = "relu", "gelu", "swiglu"  # model.activation: the position-wise FFN's (model/layers.py)
ACTIVATIONS = {RELU: "ReLU", GELU: "GELU", SWIGLU: "SwiGLU"}  # each value, as prose writes it


@dataclass
class ModelConfig:
    """Sizes and switches of the encoder-decoder Transformer."""

    d_model: int = 256  # width of every residual stream
    n_heads: int = 4  # attention heads; d_model must be divisible by it
    n_encoder_layers: int = 3  # encoder depth
    n_decoder_layers: int = 3  # decoder depth
    d_ff: int = 1024  # hidden width of the position-wise feed-forward
    activation: str = RELU  # FFN: "relu", "gelu" (exact erf) or "swiglu" (gated; d_ff as given)
    dropout: float = 0.1  # dropout on embeddings, sublayer outputs and FFN hidden
    attention_dropout: float = 0.0  # dropout on attention weights
    max_positions: int = 256  # longest sequence the positional encoding covers
    learned_positions: bool = False  # learned instead of sinusoidal positions
    norm_first: bool = False  # pre-norm; False is the paper's post-norm
    qk_norm: bool = False  # RMS-normalise each head's queries and keys before the scores
    tie_embeddings: bool = True  # share src/tgt embeddings and the output projection

    def __post_init__(self) -> None:
        finite("model", self)
        for name in ("d_model", "n_heads", "n_encoder_layers", "n_decoder_layers", "d_ff", "max_positions"):
            positive(f"model.{name}", getattr(self, name))
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
            )
        probability("model.dropout", self.dropout)
        probability("model.attention_dropout", self.attention_dropout)
        if self.activation not in ACTIVATIONS:
            raise ConfigError(
                f"model.activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}"
            )
