"""The encoder-decoder Transformer: embeddings and positions, encoder, decoder, incremental step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seq2seq.config import SPECIAL_IDS, ModelConfig, SpecialIds
from seq2seq.model.attention import padding_mask
from seq2seq.model.dropout import Dropout
from seq2seq.model.layers import DecoderLayer, EncoderLayer, LayerCache, Moves


def sinusoidal_table(max_positions: int, d_model: int) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same); (max_positions, d_model)."""
    position = torch.arange(max_positions, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_positions, d_model)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table


class Embedding(nn.Module):
    """Token embedding scaled by √d_model plus positional encoding, then dropout."""

    def __init__(self, vocab_size: int, cfg: ModelConfig, pad_id: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
        self.scale = math.sqrt(cfg.d_model)
        self.max_positions = cfg.max_positions
        if cfg.learned_positions:
            self.positions: nn.Parameter | None = nn.Parameter(torch.zeros(cfg.max_positions, cfg.d_model))
        else:
            self.positions = None
            self.register_buffer("table", sinusoidal_table(cfg.max_positions, cfg.d_model), persistent=False)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        """ids: (B, T) at positions offset.. offset+T-1 -> (B, T, D)."""
        end = offset + ids.size(1)
        if end > self.max_positions:
            raise ValueError(
                f"sequence of length {end} exceeds model.max_positions={self.max_positions}; "
                "truncate the input or train with a larger max_positions"
            )
        table = self.positions if self.positions is not None else self.table
        return self.dropout(self.tokens(ids) * self.scale + table[offset:end])

    def at(self, ids: Tensor, position: Tensor) -> Tensor:
        """ids: (B,) all at ``position``, a 0-d tensor (so that a compiled step reads it) -> (B, 1, D)."""
        table = self.positions if self.positions is not None else self.table
        return self.dropout(self.tokens(ids[:, None]) * self.scale + table.index_select(0, position.view(1)))


@dataclass
class DecoderCache:
    """Incremental decoding state: one :class:`LayerCache` per layer plus the source mask.

    Rows are sentence-major: each of the n sentences has ``beams`` consecutive rows, which share
    the sentence's cross-attention K/V and source mask.
    """

    layers: list[LayerCache]
    src_mask: Tensor  # (n, 1, 1, S)
    length: int = 0  # target positions decoded so far
    beams: int = 1  # rows per sentence

    def index_select(self, index: Tensor) -> DecoderCache:
        """Keep/reorder sentences of a one-row-per-sentence cache (dropping finished ones). index: (n',)."""
        if self.beams != 1:
            raise ValueError("index_select picks sentences of a cache with one row each; use reorder")
        return self.reorder(index, index)

    def reorder(
        self, rows: Tensor, sentences: Tensor | None = None, beams: int | None = None
    ) -> DecoderCache:
        """Self-attention rows at ``rows`` (n'·beams,); the sentences at ``sentences`` (n',), each now
        with ``beams`` rows, when given (else the rows moved within their own sentence).

        The rows move in place, copying only those whose source differs, unless the rows per
        sentence change (beam search's first step), which needs new buffers.
        """
        beams = self.beams if beams is None else beams
        src_mask = self.src_mask if sentences is None else self.src_mask.index_select(0, sentences)
        if beams != self.beams:
            layers = [layer.reorder(rows, sentences) for layer in self.layers]
        else:
            moves, moved_sentences = Moves(rows), None if sentences is None else Moves(sentences)
            layers = [layer.move(moves, moved_sentences) for layer in self.layers]
        return DecoderCache(layers, src_mask, self.length, beams)


class Transformer(nn.Module):
    """Encoder-decoder Transformer (Vaswani et al., 2017) with an encode/decode split.

    ``encode`` runs once per source; ``decode`` scores a whole target prefix (training);
    ``start_cache`` + ``step`` decode one token at a time reusing every earlier key/value.
    The model carries its special ids, so decoding needs nothing from the data stage.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        src_vocab_size: int,
        tgt_vocab_size: int,
        special_ids: SpecialIds = SPECIAL_IDS,
    ) -> None:
        super().__init__()
        if cfg.tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError("model.tie_embeddings needs a shared vocabulary (set data.shared_vocab=true)")
        self.cfg = cfg
        self.special_ids = special_ids
        pad_id = special_ids.pad
        self.src_embed = Embedding(src_vocab_size, cfg, pad_id)
        self.tgt_embed = Embedding(tgt_vocab_size, cfg, pad_id)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        # Pre-norm leaves the residual stream unnormalised; the paper's post-norm ends normalised.
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.generator = nn.Linear(cfg.d_model, tgt_vocab_size, bias=False)
        self._init_weights()
        if cfg.tie_embeddings:
            self.tgt_embed.tokens.weight = self.src_embed.tokens.weight
            self.generator.weight = self.src_embed.tokens.weight

    @property
    def pad_id(self) -> int:
        return self.special_ids.pad

    @property
    def bos_id(self) -> int:
        return self.special_ids.bos

    @property
    def eos_id(self) -> int:
        return self.special_ids.eos

    def num_parameters(self) -> int:
        """How many numbers the model learns; a tied embedding counts once."""
        return sum(p.numel() for p in self.parameters())

    def _init_weights(self) -> None:
        """Xavier-uniform matrices; embeddings N(0, d^-1/2) so the √d scaling gives unit variance."""
        for name, param in self.named_parameters():
            if "tokens" in name or name == "generator.weight":
                nn.init.normal_(param, std=self.cfg.d_model**-0.5)
            elif param.dim() > 1:
                nn.init.xavier_uniform_(param)
        for embed in (self.src_embed, self.tgt_embed):
            embed.tokens.weight.data[self.pad_id].zero_()

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """``torch.compile`` each encoder and decoder layer in place (arguments as ``torch.compile``'s).

        Training goes through :meth:`encode` and :meth:`decode_states`, not ``forward``, so it is the
        layers that are compiled; alike layers share their compiled code, and the parameters keep
        their names.
        """
        for layer in [*self.encoder_layers, *self.decoder_layers]:
            layer.compile(*args, **kwargs)

    def encode(self, src: Tensor, attention: list[Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """src: (B, S) ids -> memory (B, S, D) and its key mask (B, 1, 1, S)."""
        src_mask = padding_mask(src, self.pad_id)
        x = self.src_embed(src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask, attention)
        return self.encoder_norm(x), src_mask

    def decode(
        self, tgt: Tensor, memory: Tensor, src_mask: Tensor, attention: dict[str, list[Tensor]] | None = None
    ) -> Tensor:
        """Teacher-forced decoder. tgt: (B, T) ids -> logits (B, T, V)."""
        return self.generator(self.decode_states(tgt, memory, src_mask, attention))

    def decode_states(
        self, tgt: Tensor, memory: Tensor, src_mask: Tensor, attention: dict[str, list[Tensor]] | None = None
    ) -> Tensor:
        """The decoder's final states, which ``generator`` turns into logits. tgt: (B, T) -> (B, T, D),
        right-padded, as every batch here is.

        Training projects them with the loss, at real target tokens only
        (:func:`~seq2seq.training.loss.sequence_loss`). With right padding, the look-ahead mask
        alone keeps every real token from the pad keys (they all come after it), so the fused path
        passes no mask tensor at all; the explicit path, whose weights are shown, masks the pad keys too.
        """
        tgt_mask = padding_mask(tgt, self.pad_id) if attention is not None else None  # (B, 1, 1, T)
        x = self.tgt_embed(tgt)
        for layer in self.decoder_layers:
            x = layer(x, memory, tgt_mask, src_mask, attention)
        return self.decoder_norm(x)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """src: (B, S), tgt: (B, T) -> logits (B, T, V)."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt, memory, src_mask)

    def start_cache(self, memory: Tensor, src_mask: Tensor, capacity: int = 32) -> DecoderCache:
        """Cache for :meth:`step`; computes every layer's cross-attention K/V once.

        ``capacity`` target positions are preallocated; the buffers double when exceeded.
        """
        return DecoderCache([layer.start_cache(memory, capacity) for layer in self.decoder_layers], src_mask)

    def step(self, tokens: Tensor, cache: DecoderCache) -> tuple[Tensor, DecoderCache]:
        """Feed the newest token of each row. tokens: (B,) -> next-token logits (B, V) and the new cache.

        B is the cache's rows: its sentences times ``cache.beams``, sentence-major."""
        states, cache = self.step_states(tokens, cache)
        return self.generator(states), cache  # (B, V)

    def step_states(self, tokens: Tensor, cache: DecoderCache) -> tuple[Tensor, DecoderCache]:
        """:meth:`step` without the output projection: the decoder's final states (B, D), for a
        search that projects onto part of the vocabulary (a shortlist)."""
        x = self.tgt_embed(tokens[:, None], offset=cache.length)  # (B, 1, D)
        layers = []
        for layer, layer_cache in zip(self.decoder_layers, cache.layers, strict=True):
            x, layer_cache = layer.step(x, layer_cache, cache.src_mask, cache.beams)
            layers.append(layer_cache)
        states = self.decoder_norm(x)[:, 0]  # (B, D)
        return states, DecoderCache(layers, cache.src_mask, cache.length + 1, cache.beams)

    def step_at(
        self, tokens: Tensor, position: Tensor, layers: list[LayerCache], src_mask: Tensor, beams: int
    ) -> Tensor:
        """:meth:`step_states` over caches of a fixed capacity, for a compiled step: every row is at
        ``position`` (a 0-d tensor, so one graph serves every step). tokens: (B,) -> states (B, D)."""
        x = self.tgt_embed.at(tokens, position)  # (B, 1, D)
        capacity = layers[0].self_k.size(2)
        visible = (torch.arange(capacity, device=tokens.device) <= position).view(1, 1, 1, capacity)
        for layer, layer_cache in zip(self.decoder_layers, layers, strict=True):
            x = layer.step_at(x, layer_cache, src_mask, beams, position, visible)
        return self.decoder_norm(x)[:, 0]  # (B, D)

    def attention_maps(self, src: Tensor, tgt: Tensor) -> dict[str, list[Tensor]]:
        """Attention weights of every layer via the explicit path, for plots and tests.

        Returns {"encoder", "decoder_self", "cross"}: lists (one per layer) of (B, H, Tq, Tk).
        """
        encoder: list[Tensor] = []
        decoder: dict[str, list[Tensor]] = {"self": [], "cross": []}
        memory, src_mask = self.encode(src, encoder)
        self.decode(tgt, memory, src_mask, decoder)
        return {"encoder": encoder, "decoder_self": decoder["self"], "cross": decoder["cross"]}
