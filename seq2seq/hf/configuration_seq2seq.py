"""The transformers config of seq2seq's encoder-decoder Transformer: the fields of seq2seq's
``ModelConfig`` that shape the network, the vocabulary size and the special ids.

Self-contained (torch and transformers only): ``python -m seq2seq.export --to transformers`` copies
it into the folder beside ``modeling_seq2seq.py`` for ``trust_remote_code=True``. Every field is
written by the export, so the defaults are ``None`` rather than a second copy of seq2seq's own.
"""

from __future__ import annotations

from transformers import PretrainedConfig


class Seq2SeqTransformerConfig(PretrainedConfig):
    """Sizes and switches, named as in seq2seq's ``ModelConfig`` (and mapped to transformers' usual names)."""

    model_type = "seq2seq_transformer"
    attribute_map = {  # noqa: RUF012  (transformers reads it as a plain class attribute)
        "hidden_size": "d_model",
        "num_attention_heads": "n_heads",
        "num_hidden_layers": "n_decoder_layers",  # the layers a key/value cache has
        "max_position_embeddings": "max_positions",
    }

    def __init__(
        self,
        vocab_size: int | None = None,  # one vocabulary for source and target
        d_model: int | None = None,
        n_heads: int | None = None,
        n_encoder_layers: int | None = None,
        n_decoder_layers: int | None = None,
        d_ff: int | None = None,
        activation: str | None = None,  # "relu", "gelu" (exact erf) or "swiglu"
        max_positions: int | None = None,
        learned_positions: bool | None = None,  # else seq2seq's interleaved sinusoidal table
        norm_first: bool | None = None,  # pre-norm, with a final LayerNorm on each side
        tie_embeddings: bool | None = None,  # one table: source, target and output projection
        qk_norm: bool = False,  # RMS norms of each head's queries and keys
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        use_cache: bool = True,
        **kwargs,
    ) -> None:
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_encoder_layers = n_encoder_layers
        self.n_decoder_layers = n_decoder_layers
        self.d_ff = d_ff
        self.activation = activation
        self.max_positions = max_positions
        self.learned_positions = learned_positions
        self.norm_first = norm_first
        self.tie_embeddings = tie_embeddings
        self.qk_norm = qk_norm
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.use_cache = use_cache
        # The model shares its one table itself: transformers' own tying stays off.
        kwargs["tie_word_embeddings"] = False
        kwargs["is_encoder_decoder"] = True
        super().__init__(**kwargs)
