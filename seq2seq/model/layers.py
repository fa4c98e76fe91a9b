"""Encoder and decoder layers: attention and feed-forward sublayers wrapped in Add & Norm."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.config import GELU, RELU, SWIGLU, ModelConfig
from seq2seq.model.attention import MultiHeadAttention
from seq2seq.model.dropout import Dropout


class FeedForward(nn.Module):
    """Position-wise FFN: Linear -> ReLU or GELU -> dropout -> Linear.

    Its weights are ``net.0`` (D -> d_ff) and ``net.3`` (d_ff -> D): the names checkpoints were
    written with and the exporters read.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: nn.Module) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff), activation, Dropout(dropout), nn.Linear(d_ff, d_model)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class GatedFeedForward(nn.Module):
    """SwiGLU FFN (Shazeer 2020, "GLU Variants Improve Transformer"): dropout(SiLU(x W_gate) * x W_up) W_down.

    Three D x d_ff matrices where :class:`FeedForward` has two, so 2/3 of a ReLU FFN's d_ff gives as
    many matrix weights (683 for 1024); d_ff is used as given. Its weights are ``gate_proj`` (the one
    through SiLU), ``up_proj`` and ``down_proj``, with biases like every other projection here.
    In training mode the gate and up projections are one matmul over their concatenated weights,
    as :class:`~seq2seq.model.attention.MultiHeadAttention` does for Q, K and V, and for the same
    reasons.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff)
        self.up_proj = nn.Linear(d_model, d_ff)
        self.dropout = Dropout(dropout)
        self.down_proj = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        if self.training:
            weight = torch.cat([self.gate_proj.weight, self.up_proj.weight])  # (2 d_ff, D)
            bias = torch.cat([self.gate_proj.bias, self.up_proj.bias])  # (2 d_ff,)
            gate, up = F.linear(x, weight, bias).chunk(2, dim=-1)  # 2 x (B, T, d_ff)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(self.dropout(F.silu(gate) * up))


def feed_forward(cfg: ModelConfig) -> FeedForward | GatedFeedForward:
    """The position-wise FFN that ``cfg.activation`` names (GELU is the exact, erf one)."""
    if cfg.activation == SWIGLU:
        return GatedFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)
    activation = {RELU: nn.ReLU, GELU: nn.GELU}[cfg.activation]()  # config/model.py validated the name
    return FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, activation)


class AddNorm(nn.Module):
    """Residual connection around a sublayer: post-norm as in the paper, or pre-norm."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Self-attention -> Add & Norm -> FFN -> Add & Norm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout, cfg.qk_norm)
        self.ffn = feed_forward(cfg)
        self.attn_block = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.ffn_block = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(self, x: Tensor, src_mask: Tensor, weights: list[Tensor] | None = None) -> Tensor:
        """x: (B, S, D); src_mask: (B, 1, 1, S). Appends attention weights to ``weights`` if given."""
        x = self.attn_block(
            x, lambda h: _record(self.self_attn(h, mask=src_mask, need_weights=weights is not None), weights)
        )
        return self.ffn_block(x, self.ffn)


class Moves:
    """Where each row of a cache comes from after a reorder, and which rows that changes: row i
    takes row ``source[i]`` (N',) of the cache before. Reading the changed rows is done once and
    serves every layer's buffers."""

    def __init__(self, source: Tensor) -> None:
        self.source = source
        self.changed = (source != torch.arange(source.numel(), device=source.device)).nonzero().squeeze(1)
        self.from_rows = source[self.changed]

    def apply(self, buffer: Tensor, length: int) -> Tensor:
        """``buffer`` (N, H, capacity, D/H) with its first ``length`` positions moved in place, cut to
        the N' rows kept. The changed rows are read before any is written, so sources may be targets."""
        if self.changed.numel():
            written = buffer[:, :, :length]
            written.index_copy_(0, self.changed, written.index_select(0, self.from_rows))
        return buffer[: self.source.numel()]


@dataclass
class LayerCache:
    """One decoder layer's incremental state: self-attention K/V buffers, fixed cross-attention K/V.

    The self-attention buffers hold ``capacity`` positions filled in place, so a step writes one
    slot instead of re-allocating and copying every earlier key/value (``torch.cat``); only the
    first ``length`` positions are valid. A full buffer doubles. The cross-attention K/V are kept
    once per sentence, however many beam rows it has. Rows move in place (:meth:`move`): a beam
    that stays in its parent's row, or a sentence that keeps its place, copies nothing. Caches are
    for inference: those writes into preallocated buffers are not followed by autograd.
    """

    self_k: Tensor  # (N, H, capacity, D/H), one row per beam
    self_v: Tensor  # (N, H, capacity, D/H)
    cross_k: Tensor  # (n, H, S, D/H), one row per sentence
    cross_v: Tensor  # (n, H, S, D/H)
    length: int = 0  # valid self-attention positions

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> LayerCache:
        """Self-attention rows at ``rows`` (N',) in new buffers, for a search whose rows per sentence
        change (beam search's first step); the sentences' cross-attention K/V at ``sentences`` (n',)
        when given, else unchanged."""
        cross = (self.cross_k, self.cross_v)
        if sentences is not None:
            cross = tuple(t.index_select(0, sentences) for t in cross)
        gathered = []
        for buffer in (self.self_k, self.self_v):
            target = buffer.new_empty(rows.numel(), *buffer.shape[1:])  # (N', H, capacity, D/H)
            torch.index_select(buffer[:, :, : self.length], 0, rows, out=target[:, :, : self.length])
            gathered.append(target)
        return LayerCache(*gathered, *cross, self.length)

    def move(self, rows: Moves, sentences: Moves | None = None) -> LayerCache:
        """Row i takes the self-attention K/V of row ``rows.source[i]``, in place; the sentences'
        cross-attention K/V likewise when given. Only the rows that change are copied; the buffers
        shrink to the rows kept."""
        self_kv = [rows.apply(buffer, self.length) for buffer in (self.self_k, self.self_v)]
        cross = (self.cross_k, self.cross_v)
        if sentences is not None:
            cross = tuple(sentences.apply(t, t.size(2)) for t in cross)
        return LayerCache(*self_kv, *cross, self.length)

    def with_room(self) -> LayerCache:
        """This cache, with its self-attention buffers doubled (at least 8 more) when they are full."""
        if self.length < self.self_k.size(2):
            return self
        b, h, capacity, dh = self.self_k.shape
        extra = max(capacity, 8)
        grown = [torch.cat([t, t.new_empty(b, h, extra, dh)], dim=2) for t in (self.self_k, self.self_v)]
        return LayerCache(*grown, self.cross_k, self.cross_v, self.length)


class DecoderLayer(nn.Module):
    """Masked self-attention -> Add & Norm -> cross-attention -> Add & Norm -> FFN -> Add & Norm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout, cfg.qk_norm)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout, cfg.qk_norm)
        self.ffn = feed_forward(cfg)
        self.self_block = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.cross_block = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.ffn_block = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None,
        src_mask: Tensor,
        weights: dict[str, list[Tensor]] | None = None,
    ) -> Tensor:
        """x: (B, T, D); memory: (B, S, D); src_mask: (B, 1, 1, S); tgt_mask: (B, 1, 1, T) key
        padding, to which self-attention adds the look-ahead mask, or None for right-padded targets,
        where the look-ahead mask alone hides every pad key from every real query."""
        want = weights is not None
        self_w = weights["self"] if want else None
        cross_w = weights["cross"] if want else None
        x = self.self_block(
            x, lambda h: _record(self.self_attn(h, mask=tgt_mask, need_weights=want, causal=True), self_w)
        )
        x = self.cross_block(
            x, lambda h: _record(self.cross_attn(h, memory, mask=src_mask, need_weights=want), cross_w)
        )
        return self.ffn_block(x, self.ffn)

    def start_cache(self, memory: Tensor, capacity: int) -> LayerCache:
        """Self-attention buffers for ``capacity`` positions plus cross-attention K/V, computed once.

        The cross-attention K/V are made contiguous here, once, so that the matmuls of every step
        read them in place instead of copying them.
        """
        cross_k, cross_v = (t.contiguous() for t in self.cross_attn.project_kv(memory))
        b, h, _, dh = cross_k.shape
        buffers = [cross_k.new_empty(b, h, capacity, dh) for _ in range(2)]  # (B, H, capacity, D/H)
        return LayerCache(*buffers, cross_k, cross_v)

    def step(
        self, x: Tensor, cache: LayerCache, src_mask: Tensor, beams: int = 1
    ) -> tuple[Tensor, LayerCache]:
        """Decode one new position. x: (n·beams, 1, D), sentence-major -> (n·beams, 1, D) and the grown cache.

        Writes the new key/value into the buffers in place: the cache passed in must not be reused.
        The new token may attend to every cached position, so no causal mask is needed. In
        cross-attention a sentence's beams are the queries over its one copy of the source keys and
        values (beamable attention): one (beams x S) product per head instead of ``beams`` copies.
        """
        cache = cache.with_room()
        t = cache.length

        def self_attention(h: Tensor) -> Tensor:
            k, v = self.self_attn.project_kv(h)  # (N, H, 1, D/H)
            cache.self_k[:, :, t : t + 1] = k
            cache.self_v[:, :, t : t + 1] = v
            return self.self_attn.attend(h, cache.self_k[:, :, : t + 1], cache.self_v[:, :, : t + 1])[0]

        grown = LayerCache(cache.self_k, cache.self_v, cache.cross_k, cache.cross_v, t + 1)
        return self._step_blocks(x, self_attention, cache, src_mask, beams), grown

    def step_at(
        self, x: Tensor, cache: LayerCache, src_mask: Tensor, beams: int, position: Tensor, visible: Tensor
    ) -> Tensor:
        """:meth:`step` at a fixed capacity: writes the new key/value at ``position`` (0-d) in place
        and attends over every slot, ``visible`` (1, 1, 1, capacity) hiding those not yet written."""

        def self_attention(h: Tensor) -> Tensor:
            k, v = self.self_attn.project_kv(h)  # (N, H, 1, D/H)
            cache.self_k.index_copy_(2, position.view(1), k)
            cache.self_v.index_copy_(2, position.view(1), v)
            return self.self_attn.attend(h, cache.self_k, cache.self_v, visible)[0]

        return self._step_blocks(x, self_attention, cache, src_mask, beams)

    def _step_blocks(
        self,
        x: Tensor,
        self_attention: Callable[[Tensor], Tensor],
        cache: LayerCache,
        src_mask: Tensor,
        beams: int,
    ) -> Tensor:
        """One position through the three sublayers, self-attention as given."""

        def cross_attention(h: Tensor) -> Tensor:
            queries = h.view(-1, beams, h.size(-1))  # (n, beams, D): a sentence's beams as its queries
            out = self.cross_attn.attend(queries, cache.cross_k, cache.cross_v, src_mask)[0]
            return out.view(h.shape)  # (n·beams, 1, D)

        x = self.cross_block(self.self_block(x, self_attention), cross_attention)
        return self.ffn_block(x, self.ffn)


def _record(result: tuple[Tensor, Tensor | None], sink: list[Tensor] | None) -> Tensor:
    """Return an attention output, appending its weights to ``sink`` when one is given."""
    out, weights = result
    if sink is not None and weights is not None:
        sink.append(weights)
    return out
