"""The layers of seq2seq's transformers class (:mod:`modeling_seq2seq`): embeddings, attention, the
feed-forwards and the encoder and decoder layers, named as in ``seq2seq/model`` so the export maps
weights by name. Self-contained like the class (torch and transformers only): the export copies
this file beside it for ``trust_remote_code=True``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers.cache_utils import Cache

from .configuration_seq2seq import Seq2SeqTransformerConfig


def sinusoidal_positions(start: int, end: int, d_model: int, device: torch.device) -> Tensor:
    """Rows start..end-1 of seq2seq's table: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] =
    cos(same), interleaved; (end - start, d_model) in float32. Computed, not stored, so loading
    needs no buffer."""
    position = torch.arange(start, end, dtype=torch.float32, device=device)[:, None]
    exponents = torch.arange(0, d_model, 2, dtype=torch.float32, device=device)
    inv_freq = torch.exp(exponents * (-math.log(10000.0) / d_model))
    table = torch.zeros(end - start, d_model, device=device)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table


def stored_kv(cache: Cache, layer: int) -> tuple[Tensor, Tensor]:
    """The keys and values a ``DynamicCache`` holds for ``layer``: per-layer objects in recent
    releases (4.57 has them), two lists in older ones (4.45)."""
    if hasattr(cache, "layers"):
        return cache.layers[layer].keys, cache.layers[layer].values
    return cache.key_cache[layer], cache.value_cache[layer]


class Embedding(nn.Module):
    """Token embedding (absent on the decoder side when tied) scaled by √d_model, plus positions."""

    def __init__(self, config: Seq2SeqTransformerConfig, own_tokens: bool) -> None:
        super().__init__()
        d = config.d_model
        self.tokens = (
            nn.Embedding(config.vocab_size, d, padding_idx=config.pad_token_id) if own_tokens else None
        )
        self.positions = (
            nn.Parameter(torch.zeros(config.max_positions, d)) if config.learned_positions else None
        )
        self.scale = math.sqrt(d)
        self.max_positions = config.max_positions
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: Tensor, offset: int, tokens: nn.Embedding) -> Tensor:
        """ids: (B, T) at positions offset..offset+T-1, looked up in ``tokens`` -> (B, T, D)."""
        end = offset + ids.size(1)
        if end > self.max_positions:
            raise ValueError(f"sequence of length {end} exceeds the model's {self.max_positions} positions")
        x = tokens(ids) * self.scale
        if self.positions is not None:
            return self.dropout(x + self.positions[offset:end])
        return self.dropout(x + sinusoidal_positions(offset, end, x.size(-1), x.device).to(x.dtype))


class Attention(nn.Module):
    """Multi-head attention with a fused key/value projection, as seq2seq's ``MultiHeadAttention``;
    with ``qk_norm``, each head's queries and keys are RMS-normalised (eps 1e-5) before the scores."""

    def __init__(self, config: Seq2SeqTransformerConfig) -> None:
        super().__init__()
        d = config.d_model
        self.n_heads = config.n_heads
        self.dropout = config.attention_dropout
        self.q_proj = nn.Linear(d, d)
        self.kv_proj = nn.Linear(d, 2 * d)
        self.out_proj = nn.Linear(d, d)
        head_dim = d // config.n_heads
        self.q_norm = nn.RMSNorm(head_dim, eps=1e-5) if config.qk_norm else nn.Identity()
        self.k_norm = nn.RMSNorm(head_dim, eps=1e-5) if config.qk_norm else nn.Identity()

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)  # (B, H, T, D/H)

    def project_kv(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``source`` (B, Tk, D), each (B, H, Tk, D/H)."""
        k, v = self.kv_proj(source).chunk(2, dim=-1)
        return self.k_norm(self.split_heads(k)), self.split_heads(v)

    def forward(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Queries ``x`` (B, Tq, D) over projected ``k``/``v``; ``mask`` (True: may attend) broadcasts
        to (B, H, Tq, Tk)."""
        q = self.q_norm(self.split_heads(self.q_proj(x)))  # (B, H, Tq, D/H)
        dropout = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        return self.out_proj(out.transpose(1, 2).flatten(2))  # (B, Tq, D): heads concatenated


class FeedForward(nn.Module):
    """Linear -> ReLU or exact GELU -> dropout -> Linear (``net.0`` and ``net.3``, as seq2seq's)."""

    def __init__(self, config: Seq2SeqTransformerConfig) -> None:
        super().__init__()
        activation = {"relu": nn.ReLU, "gelu": nn.GELU}[config.activation]()
        self.net = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff),
            activation,
            nn.Dropout(config.dropout),
            nn.Linear(config.d_ff, config.d_model),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class GatedFeedForward(nn.Module):
    """SwiGLU: dropout(SiLU(x W_gate) * x W_up) W_down, each projection with a bias."""

    def __init__(self, config: Seq2SeqTransformerConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.d_model, config.d_ff)
        self.up_proj = nn.Linear(config.d_model, config.d_ff)
        self.dropout = nn.Dropout(config.dropout)
        self.down_proj = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.dropout(F.silu(self.gate_proj(x)) * self.up_proj(x)))


class AddNorm(nn.Module):
    """Residual connection around a sublayer, LayerNorm after (post-norm) or before it (pre-norm)."""

    def __init__(self, config: Seq2SeqTransformerConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.norm_first = config.norm_first

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


def feed_forward(config: Seq2SeqTransformerConfig) -> nn.Module:
    return GatedFeedForward(config) if config.activation == "swiglu" else FeedForward(config)


class EncoderLayer(nn.Module):
    def __init__(self, config: Seq2SeqTransformerConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.ffn = feed_forward(config)
        self.attn_block = AddNorm(config)
        self.ffn_block = AddNorm(config)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self.attn_block(x, lambda h: self.self_attn(h, *self.self_attn.project_kv(h), mask))
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, config: Seq2SeqTransformerConfig, index: int) -> None:
        super().__init__()
        self.index = index  # this layer's place in the cache
        self.self_attn = Attention(config)
        self.cross_attn = Attention(config)
        self.ffn = feed_forward(config)
        self.self_block = AddNorm(config)
        self.cross_block = AddNorm(config)
        self.ffn_block = AddNorm(config)

    def forward(
        self, x: Tensor, memory: Tensor, self_mask: Tensor | None, memory_mask: Tensor | None, cache
    ) -> Tensor:
        """x: (B, T, D) for the positions after those in ``cache`` (an EncoderDecoderCache, or None)."""

        def self_attention(h: Tensor) -> Tensor:
            k, v = self.self_attn.project_kv(h)
            if cache is not None:
                k, v = cache.self_attention_cache.update(k, v, self.index)  # every position so far
            return self.self_attn(h, k, v, self_mask)

        def cross_attention(h: Tensor) -> Tensor:
            if cache is None:
                return self.cross_attn(h, *self.cross_attn.project_kv(memory), memory_mask)
            cross = cache.cross_attention_cache
            if cross.get_seq_length(self.index) == 0:  # the first step: project the source once
                cross.update(*self.cross_attn.project_kv(memory), self.index)
            return self.cross_attn(h, *stored_kv(cross, self.index), memory_mask)

        x = self.self_block(x, self_attention)
        x = self.cross_block(x, cross_attention)
        return self.ffn_block(x, self.ffn)
