"""seq2seq's encoder-decoder Transformer as a transformers model, for ``AutoModelForSeq2SeqLM`` and
``generate()``: every model ``train.py`` trains, those no class of transformers computes included
(a SwiGLU feed-forward, learned positions, pre-norm with untied embeddings).

Self-contained (torch and transformers only): the export copies this file, its layers
(``layers_seq2seq.py``) and ``configuration_seq2seq.py`` into the folder for
``trust_remote_code=True``. Modules are named as in ``seq2seq/model`` (``encoder.embed`` is its
``src_embed``, ``encoder.layers`` its ``encoder_layers``, and so on), so the export maps weights by
name. With tied embeddings there is one token table, the encoder's, which the decoder and the
output projection read. The key/value cache is transformers' ``EncoderDecoderCache``:
self-attention keys and values grow by one position a step; cross-attention ones are computed on
the first step and kept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from .configuration_seq2seq import Seq2SeqTransformerConfig
from .layers_seq2seq import DecoderLayer, Embedding, EncoderLayer

# transformers 5 calls the cache "cache" (in generate() and in outputs) where 4.x said "past_key_values".
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


class Encoder(nn.Module):
    """Source ids -> memory; what ``generate()`` runs once per batch (``get_encoder()``)."""

    main_input_name = "input_ids"  # generate() reads it

    def __init__(self, config: Seq2SeqTransformerConfig) -> None:
        super().__init__()
        self.pad_token_id = config.pad_token_id
        self.embed = Embedding(config, own_tokens=True)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.norm = nn.LayerNorm(config.d_model) if config.norm_first else nn.Identity()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, **kwargs) -> BaseModelOutput:
        """input_ids: (B, S) -> last_hidden_state (B, S, D). Without ``attention_mask``, pad ids are
        masked, as seq2seq masks them. Attentions and hidden states are not returned."""
        mask = memory_mask(input_ids, attention_mask, self.pad_token_id)
        x = self.embed(input_ids, 0, self.embed.tokens)
        for layer in self.layers:
            x = layer(x, mask)
        return BaseModelOutput(last_hidden_state=self.norm(x))


class Decoder(nn.Module):
    def __init__(self, config: Seq2SeqTransformerConfig) -> None:
        super().__init__()
        self.embed = Embedding(config, own_tokens=not config.tie_embeddings)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.n_decoder_layers))
        self.norm = nn.LayerNorm(config.d_model) if config.norm_first else nn.Identity()

    def forward(
        self,
        ids: Tensor,
        tokens: nn.Embedding,
        memory: Tensor,
        memory_mask: Tensor | None,
        decoder_attention_mask: Tensor | None,
        cache,
    ) -> Tensor:
        """ids: (B, T) following the cached positions -> hidden states (B, T, D), final norm applied."""
        offset = cache.get_seq_length() if cache is not None else 0
        x = self.embed(ids, offset, tokens)
        mask = self_attention_mask(ids.size(1), offset, decoder_attention_mask, ids.device)
        for layer in self.layers:
            x = layer(x, memory, mask, memory_mask, cache)
        return self.norm(x)


def memory_mask(input_ids: Tensor | None, attention_mask: Tensor | None, pad_id: int) -> Tensor | None:
    """Key mask over the source (B, 1, 1, S): the given ``attention_mask``, else the non-pad ids."""
    if attention_mask is None:
        return None if input_ids is None else (input_ids != pad_id)[:, None, None, :]
    return attention_mask.bool()[:, None, None, :]


def self_attention_mask(length: int, offset: int, keys: Tensor | None, device: torch.device) -> Tensor | None:
    """Causal mask of ``length`` new queries after ``offset`` cached positions, (T, offset+T), and the
    key mask ``keys`` (B, offset+T) when given; None when every key may be seen (one new query)."""
    causal = None
    if length > 1:
        causal = (
            torch.arange(offset + length, device=device)
            <= torch.arange(offset, offset + length, device=device)[:, None]
        )
    if keys is None:
        return causal
    keys = keys.bool()[:, None, None, :]  # (B, 1, 1, offset+T)
    return keys if causal is None else keys & causal


class Seq2SeqTransformerForConditionalGeneration(PreTrainedModel, GenerationMixin):
    """seq2seq's Transformer: encoder, decoder with a key/value cache, output projection."""

    config_class = Seq2SeqTransformerConfig
    base_model_prefix = "seq2seq"
    main_input_name = "input_ids"
    _supports_cache_class = True  # transformers 4.x: generate() makes an EncoderDecoderCache for it

    def __init__(self, config: Seq2SeqTransformerConfig) -> None:
        super().__init__(config)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.generator = (
            None if config.tie_embeddings else nn.Linear(config.d_model, config.vocab_size, bias=False)
        )
        self.post_init()

    def get_encoder(self) -> Encoder:
        return self.encoder

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed.tokens

    @property
    def target_tokens(self) -> nn.Embedding:
        """The decoder's token table: the encoder's when the embeddings are tied."""
        return self.encoder.embed.tokens if self.config.tie_embeddings else self.decoder.embed.tokens

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        decoder_input_ids: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        labels: Tensor | None = None,
        use_cache: bool | None = None,
        cache: EncoderDecoderCache | None = None,
        past_key_values: EncoderDecoderCache | None = None,  # transformers 4.x's name for ``cache``
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """Logits (B, T, V) of ``decoder_input_ids`` (B, T) given the source; ``labels`` (B, T), when
        given without ``decoder_input_ids``, are shifted right behind BOS and give the mean
        cross-entropy over non -100 positions. Other transformers options (``return_dict``,
        ``output_attentions``, ...) are accepted and have no effect."""
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask)
        memory = encoder_outputs[0]
        if decoder_input_ids is None and labels is not None:
            start = labels.new_full((labels.size(0), 1), self.config.decoder_start_token_id)
            shifted = torch.cat([start, labels[:, :-1]], dim=1)  # (B, T)
            decoder_input_ids = shifted.masked_fill(shifted == -100, self.config.pad_token_id)
        cache = cache if cache is not None else past_key_values
        if (
            cache is None
            and (use_cache if use_cache is not None else self.config.use_cache)
            and labels is None
        ):
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        hidden = self.decoder(
            decoder_input_ids,
            self.target_tokens,
            memory,
            memory_mask(input_ids, attention_mask, self.config.pad_token_id),
            decoder_attention_mask,
            cache,
        )
        output = self.target_tokens.weight if self.generator is None else self.generator.weight
        logits = F.linear(hidden, output)  # (B, T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return Seq2SeqLMOutput(
            loss=loss, logits=logits, encoder_last_hidden_state=memory, **{CACHE_FIELD: cache}
        )

    def prepare_inputs_for_generation(
        self,
        input_ids: Tensor,
        cache: EncoderDecoderCache | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        attention_mask: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
        encoder_outputs: BaseModelOutput | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> dict:
        """What ``generate()`` passes to :meth:`forward` each step: the decoder ids not in the cache yet."""
        cache = cache if cache is not None else past_key_values
        done = cache.get_seq_length() if cache is not None else 0
        return {
            "decoder_input_ids": input_ids[:, done:],
            "attention_mask": attention_mask,
            "decoder_attention_mask": decoder_attention_mask,
            "encoder_outputs": encoder_outputs,
            "use_cache": use_cache,
            "cache": cache,
        }
