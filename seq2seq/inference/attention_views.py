"""Every attention map of one translated sentence, and the one heatmap drawing for all of them.

The CLI's ``--attention-png``, TensorBoard's attention images and grids, and the HTTP
``/attention`` endpoint all read weights through :func:`sentence_attention` and draw them through
:func:`heatmap_figure` / :func:`grid_figure`. Axis convention: encoder rows and columns are
source tokens (EOS last); decoder rows are the token each position predicts (EOS last), decoder
self-attention columns are the decoder inputs (BOS first), cross-attention columns are source tokens.
Matplotlib is imported only when a figure is drawn (about a second), so the server never pays it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.data.tokenizers.tokenizer import (
    BOS_ID,
    EOS_ID,
    SPECIAL_TOKENS,
    TranslationTokenizer,
    token_labels,
)
from seq2seq.inference.translator import Translation, Translator, one_line
from seq2seq.model import Transformer

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CELL_INCHES = 0.3  # per token in a single heatmap
GRID_CELL_INCHES = 0.16  # per token in one panel of a layer x head grid


class AttentionKind(Enum):
    """The three attention blocks of the Transformer; the value names them in tags and JSON."""

    ENCODER_SELF = "encoder_self"
    DECODER_SELF = "decoder_self"
    CROSS = "cross"

    @property
    def title(self) -> str:
        return {
            AttentionKind.ENCODER_SELF: "encoder self",
            AttentionKind.DECODER_SELF: "decoder self (causal)",
            AttentionKind.CROSS: "cross (target → source)",
        }[self]


_MODEL_KEYS = {  # keys of Transformer.attention_maps
    AttentionKind.ENCODER_SELF: "encoder",
    AttentionKind.DECODER_SELF: "decoder_self",
    AttentionKind.CROSS: "cross",
}


@dataclass
class SentenceAttention:
    """Token labels of one sentence pair and its attention weights, every layer and head."""

    source: list[str]  # source subwords, EOS last
    target: list[str]  # decoder inputs: BOS, then the output subwords
    output: list[str]  # what each decoder position predicts: the output subwords, then EOS
    maps: dict[AttentionKind, Tensor]  # kind -> (L, H, Tq, Tk) float32 on the CPU; rows sum to 1

    def axes(self, kind: AttentionKind) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of ``kind``'s maps: queries, then keys."""
        if kind is AttentionKind.ENCODER_SELF:
            return self.source, self.source
        return self.output, self.target if kind is AttentionKind.DECODER_SELF else self.source


def sentence_attention(
    model: Transformer, tokenizer: TranslationTokenizer, source_ids: list[int], output_ids: list[int]
) -> SentenceAttention:
    """Teacher-force ``output_ids`` (no BOS/EOS) on ``source_ids`` (EOS last) and keep every map.

    An output that filled every position is cut by one token, to leave room for BOS.
    """
    output_ids = output_ids[: model.cfg.max_positions - 1]
    target_ids = [BOS_ID, *output_ids]
    device = next(model.parameters()).device
    with torch.inference_mode():
        maps = model.attention_maps(
            torch.tensor([source_ids], device=device), torch.tensor([target_ids], device=device)
        )
    stacked = {  # per layer (1, H, Tq, Tk) -> (L, H, Tq, Tk)
        kind: torch.stack([layer[0] for layer in maps[key]]).float().cpu()
        for kind, key in _MODEL_KEYS.items()
    }
    return SentenceAttention(
        source=token_labels(tokenizer.src, source_ids),
        target=token_labels(tokenizer.tgt, target_ids),
        output=[*token_labels(tokenizer.tgt, output_ids), SPECIAL_TOKENS[EOS_ID]],
        maps=stacked,
    )


def translate_with_attention(
    translator: Translator, text: str, cfg: DecodeConfig | None = None, prefix: str = ""
) -> tuple[Translation, SentenceAttention]:
    """Translate one sentence (the best hypothesis of ``cfg``, by default the translator's own, that
    continues ``prefix``) and read every attention map of it."""
    source = translator.encode([text])[0]
    if not source:
        raise ValueError("cannot show the attention of an empty sentence")
    cfg = cfg or translator.decode_cfg
    forced, _ = translator.encode_targets([source], cfg, [prefix])
    best = translator.search_prefixed([source], cfg, forced)[0][0]
    translation = Translation(one_line(translator.tokenizer.decode_target([best.tokens])[0]), best.score)
    return translation, sentence_attention(translator.model, translator.tokenizer, source, best.tokens)


def draw_heatmap(
    ax: Axes, weights: Tensor, rows: list[str] | None, columns: list[str] | None, fontsize: float = 8
) -> None:
    """Draw (rows, columns) weights in [0, 1] on ``ax`` with the tokens as tick labels; an axis whose
    labels are None gets no ticks at all (creating tick labels is much of matplotlib's drawing time)."""
    ax.imshow(weights.float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    if columns is None:
        ax.set_xticks([])
    else:
        ax.set_xticks(range(len(columns)), columns, rotation=60, ha="right", fontsize=fontsize)
    if rows is None:
        ax.set_yticks([])
    else:
        ax.set_yticks(range(len(rows)), rows, fontsize=fontsize)


def heatmap_figure(
    weights: Tensor,
    rows: list[str],
    columns: list[str],
    title: str = "",
    axis_names: tuple[str, str] = ("", ""),
) -> Figure:
    """One (rows, columns) heatmap with a colour bar; ``axis_names`` = (row axis, column axis)."""
    from matplotlib.figure import Figure  # no pyplot: no global state or GUI backend

    fig = Figure(figsize=(1.5 + CELL_INCHES * len(columns), 1.2 + CELL_INCHES * len(rows)))
    ax = fig.subplots()
    draw_heatmap(ax, weights, rows, columns)
    ax.set_ylabel(axis_names[0])
    ax.set_xlabel(axis_names[1])
    ax.set_title(title, fontsize=9)
    fig.colorbar(ax.images[0], ax=ax, fraction=0.05)
    fig.tight_layout()
    return fig


def grid_figure(attention: SentenceAttention, kind: AttentionKind) -> Figure:
    """Every layer (rows) and head (columns) of one kind; tokens label the outer panels only."""
    from matplotlib.figure import Figure

    weights = attention.maps[kind]  # (L, H, Tq, Tk)
    n_layers, n_heads, n_rows, n_columns = weights.shape
    rows, columns = attention.axes(kind)
    fig = Figure(
        figsize=(
            n_heads * (0.9 + GRID_CELL_INCHES * n_columns),
            n_layers * (0.7 + GRID_CELL_INCHES * n_rows),
        ),
        layout="constrained",
    )
    axes = fig.subplots(n_layers, n_heads, squeeze=False)
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer][head]
            outer_rows = None if head else rows  # the first column and the last row carry the tokens
            outer_columns = columns if layer == n_layers - 1 else None
            draw_heatmap(ax, weights[layer, head], outer_rows, outer_columns, fontsize=5)
            ax.set_title(f"layer {layer + 1} head {head + 1}", fontsize=6)
    fig.suptitle(f"{kind.title}: every layer and head", fontsize=8)
    return fig
