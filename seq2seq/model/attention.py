"""Masks, the attention function, and the multi-head attention module.

Masks are boolean and True means "may attend"; they broadcast to (B, H, Tq, Tk).
The explicit reference path exists so tests and attention plots can see the
weights; training and decoding take PyTorch's fused SDPA kernel.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from seq2seq.model.rms_norm import RMSNorm

# SDPA's GPU kernels in order of preference, cuDNN's left out (see fast_attention).
GPU_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
QK_NORM_EPS = 1e-5  # nn.LayerNorm's; seq2seq/hf/layers_seq2seq.py, which imports no seq2seq, repeats it


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Key-column mask hiding pad tokens: (B, K) ids -> (B, 1, 1, K)."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(length: int, device: torch.device | None = None) -> Tensor:
    """Look-ahead mask: position t sees keys <= t; the strict upper triangle is hidden. (T, T)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def reference_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """softmax(QKᵀ/√d_k + mask)·V written out; returns (output, weights).

    q: (B, H, Tq, Dh), k and v: (B, H, Tk, Dh) -> output (B, H, Tq, Dh), weights (B, H, Tq, Tk).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return F.dropout(weights, dropout_p) @ v, weights


def fast_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0, causal: bool = False
) -> Tensor:
    """Same maths as :func:`reference_attention` through the fused SDPA kernel; no weights.
    ``causal`` adds the look-ahead mask inside the kernel (self-attention, Tq == Tk), which lets a
    GPU take the flash kernel, which takes no mask tensor.

    On a GPU, cuDNN's attention is left out: it plans each new shape on the host for milliseconds,
    and batches and decoding steps bring new shapes all the time. Two CPU
    cases take other routes, both faster there: training in bf16 takes SDPA's math backend, since
    the CPU flash kernel's bf16 backward is slow, and a single query per row (one decoding step)
    takes two small matmuls, cheaper than the flash kernel's setup.
    """
    if q.device.type == "cuda":
        with sdpa_kernel(GPU_BACKENDS):
            return F.scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal=causal)
    on_cpu = q.device.type == "cpu"
    if on_cpu and q.size(-2) == 1 and not causal and not (dropout_p and q.requires_grad):
        return _single_query_attention(q, k, v, mask)
    if on_cpu and q.dtype != torch.float32 and q.requires_grad:
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal=causal)
    return F.scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal=causal)


def _single_query_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(QKᵀ/√d_k)·V for q: (B, H, 1, Dh), scaling the one query row instead of the scores."""
    scores = (q * (1.0 / math.sqrt(q.size(-1)))) @ k.transpose(-2, -1)  # (B, H, 1, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self-attention (``memory=None``) and cross-attention.

    Queries come from ``x``; keys and values from ``memory`` when given, else from ``x``.
    The key/value projection is one fused matmul, and :meth:`project_kv` is public so the
    incremental decoder can compute cross-attention K/V once and grow a self-attention cache.
    Self-attention in training mode projects Q, K and V in one matmul, with the weights of
    ``q_proj`` and ``kv_proj`` concatenated for it (the parameters and their names stay as they
    are): fewer, larger operations, and under bf16 autocast the input is cast once instead of twice.
    Inference keeps two matmuls, which spares every decoding step the concatenation.

    ``qk_norm`` RMS-normalises each head's queries and keys (with a learned gain) before the
    scores, which bounds the logits whatever the projections grow to; the cache then holds
    normalised keys.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, qk_norm: bool = False) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        head_dim = d_model // n_heads
        self.q_norm = RMSNorm(head_dim, eps=QK_NORM_EPS) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(head_dim, eps=QK_NORM_EPS) if qk_norm else nn.Identity()

    def _split_heads(self, x: Tensor, norm: nn.Module | None = None) -> Tensor:
        """(B, T, D) -> (B, H, T, D/H); ``norm`` runs first, while each head's row is contiguous."""
        b, t, d = x.shape
        heads = x.view(b, t, self.n_heads, d // self.n_heads)  # (B, T, H, D/H)
        return (heads if norm is None else norm(heads)).transpose(1, 2)

    def project_kv(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``source`` (B, Tk, D), each (B, H, Tk, D/H)."""
        k, v = self.kv_proj(source).chunk(2, dim=-1)  # 2 x (B, Tk, D)
        return self._split_heads(k, self.k_norm), self._split_heads(v)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values of ``x`` (B, T, D) in one matmul, each (B, H, T, D/H)."""
        weight = torch.cat([self.q_proj.weight, self.kv_proj.weight])  # (3D, D)
        bias = torch.cat([self.q_proj.bias, self.kv_proj.bias])  # (3D,)
        q, k, v = F.linear(x, weight, bias).chunk(3, dim=-1)  # 3 x (B, T, D)
        return self._split_heads(q, self.q_norm), self._split_heads(k, self.k_norm), self._split_heads(v)

    def attend(
        self,
        x: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
        causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from queries ``x`` (B, Tq, D) over projected ``k``/``v``; returns (B, Tq, D) and weights."""
        q = self._split_heads(self.q_proj(x), self.q_norm)
        return self._attend_heads(q, k, v, mask, need_weights, causal)

    def _attend_heads(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool, causal: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Projected ``q`` (B, H, Tq, D/H) over ``k``/``v``, through the output projection; ``causal``
        adds the look-ahead mask to ``mask``."""
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            if causal:
                look_ahead = causal_mask(q.size(-2), q.device)  # (Tq, Tk)
                mask = look_ahead if mask is None else mask & look_ahead
            out, weights = reference_attention(q, k, v, mask, dropout_p)
        else:
            out, weights = fast_attention(q, k, v, mask, dropout_p, causal), None
        out = out.transpose(1, 2).flatten(2)  # (B, Tq, D): heads concatenated
        return self.out_proj(out), weights

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
        causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Full (non-incremental) attention; ``mask`` broadcasts to (B, H, Tq, Tk), and ``causal``
        (self-attention only) adds the look-ahead mask to it."""
        if memory is None and self.training:
            return self._attend_heads(*self.project_qkv(x), mask, need_weights, causal)
        k, v = self.project_kv(x if memory is None else memory)
        return self.attend(x, k, v, mask, need_weights, causal)
