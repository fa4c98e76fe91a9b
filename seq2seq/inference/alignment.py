"""Cross-attention alignments of a translation, as a text table or a heatmap PNG.

The weights are the last decoder layer's cross-attention averaged over heads, read through
the model's explicit attention path (:meth:`Transformer.attention_maps`). Row i is the
attention while predicting output token i (the last row predicts EOS).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from seq2seq.data.tokenizer import BOS_ID, EOS_ID, SPECIAL_TOKENS, token_labels
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
    source = translator.encode([text])[0]
    if not source:
        raise AlignmentError("cannot show the attention of an empty sentence")
    best = translator.search([source], translator.settings(nbest=1))[0][0]
    target_ids = [BOS_ID, *best.tokens]
    device = translator.device
    with torch.inference_mode():
        maps = translator.model.attention_maps(
            torch.tensor([source], device=device), torch.tensor([target_ids], device=device)
        )
    weights = maps["cross"][-1][0].mean(dim=0).float().cpu()  # (H, T, S) -> (T, S)
    tokenizer = translator.tokenizer
    labels = [*token_labels(tokenizer.tgt, best.tokens), SPECIAL_TOKENS[EOS_ID]]
    return Alignment(token_labels(tokenizer.src, source), labels, weights)


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
    from matplotlib.figure import Figure  # ~1 s to import; only the heatmap needs it

    n_target, n_source = alignment.weights.shape
    fig = Figure(
        figsize=(1.0 + 0.5 * n_source, 1.0 + 0.4 * n_target)
    )  # no pyplot: no global state or GUI backend
    ax = fig.subplots()
    image = ax.imshow(alignment.weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(n_source), alignment.source, rotation=60, ha="right")
    ax.set_yticks(range(n_target), alignment.target)
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    fig.colorbar(image, ax=ax, fraction=0.05)
    fig.tight_layout()
    fig.savefig(path)
