"""Cross-attention alignments of a translation, as a text table or a heatmap PNG.

The weights are the last decoder layer's cross-attention averaged over heads, read through
the model's explicit attention path (:meth:`Transformer.attention_maps`). Row i is the
attention while predicting output token i (the last row predicts EOS).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from seq2seq.inference.attention_views import AttentionKind, heatmap_figure, translate_with_attention
from seq2seq.inference.translator import Translator


class AlignmentError(ValueError):
    """A sentence has no alignment to show."""


@dataclass
class Alignment:
    """Subword labels of both sides and the (target, source) attention weights between them."""

    source: list[str]
    target: list[str]
    weights: Tensor  # (T, S), rows sum to 1


def align(translator: Translator, text: str) -> Alignment:
    """Translate ``text`` with the translator's settings and return the best hypothesis's alignment."""
    if not text.strip():
        raise AlignmentError("cannot show the attention of an empty sentence")
    _, attention = translate_with_attention(translator, text, translator.decode_cfg_with(nbest=1))
    weights = attention.maps[AttentionKind.CROSS][-1].mean(dim=0)  # last layer (H, T, S) -> (T, S)
    return Alignment(attention.source, attention.output, weights)


def format_table(alignment: Alignment) -> str:
    """Percent attention, one row per output token and one column per source token."""
    row_width = max(len(label) for label in alignment.target)
    widths = [max(len(label), 3) for label in alignment.source]
    header = (
        " " * row_width
        + " | "
        + " ".join(label.rjust(w) for label, w in zip(alignment.source, widths, strict=True))
    )
    lines = [header, "-" * len(header)]
    for label, row in zip(alignment.target, alignment.weights.tolist(), strict=True):
        cells = " ".join(f"{round(100 * value):>{w}d}" for value, w in zip(row, widths, strict=True))
        lines.append(f"{label.ljust(row_width)} | {cells}")
    return "\n".join(lines)


def save_heatmap(alignment: Alignment, path: str | Path) -> None:
    """Write the alignment as a heatmap image (format from the file suffix, e.g. .png)."""
    fig = heatmap_figure(
        alignment.weights, alignment.target, alignment.source, axis_names=("output", "source")
    )
    fig.savefig(path)
