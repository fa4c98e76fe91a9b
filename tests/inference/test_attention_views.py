"""The shared attention views: every map of a sentence, the heatmap and the layer x head grid,
the CLI's alignment built on them, and the typical validation sentence TensorBoard draws."""

from __future__ import annotations

import statistics

import pytest
import torch

from seq2seq.data.tokenizers.tokenizer import BOS_ID, token_labels
from seq2seq.inference.alignment import align, save_heatmap
from seq2seq.inference.attention_views import (
    AttentionKind,
    grid_figure,
    heatmap_figure,
    sentence_attention,
    translate_with_attention,
)
from seq2seq.inference.translator import Translator
from seq2seq.training.monitoring import typical_sentence


def test_sentence_attention_keeps_every_layer_and_head_of_the_model(translator: Translator) -> None:
    source = translator.encode(["I like coffee."])[0]
    output = [40, 41, 42]
    attention = sentence_attention(translator.model, translator.tokenizer, source, output)
    with torch.inference_mode():
        maps = translator.model.attention_maps(torch.tensor([source]), torch.tensor([[BOS_ID, *output]]))
    for kind, key in [(AttentionKind.ENCODER_SELF, "encoder"), (AttentionKind.CROSS, "cross")]:
        torch.testing.assert_close(attention.maps[kind], torch.stack([m[0] for m in maps[key]]))
    cfg = translator.model.cfg
    for kind in AttentionKind:
        rows, columns = attention.axes(kind)
        assert attention.maps[kind].shape == (cfg.n_encoder_layers, cfg.n_heads, len(rows), len(columns))
        torch.testing.assert_close(attention.maps[kind].sum(-1), torch.ones(attention.maps[kind].shape[:-1]))
    assert attention.target[0] == "<s>" and attention.output[-1] == "</s>" and len(attention.output) == 4


def test_translate_with_attention_follows_the_translation(translator: Translator) -> None:
    decode_cfg = translator.decode_cfg_with(beam=2, nbest=1)
    translation, attention = translate_with_attention(translator, "Tom is here.", decode_cfg)
    best = next(iter(translator.translate(["Tom is here."], decode_cfg)))[0]
    assert translation.text == best.text and translation.score == pytest.approx(best.score, abs=1e-5)
    tokens = translator.search(translator.encode(["Tom is here."]), decode_cfg)[0][0].tokens
    assert attention.target == token_labels(translator.tokenizer.tgt, [BOS_ID, *tokens])
    with pytest.raises(ValueError, match="empty"):
        translate_with_attention(translator, "   ")


def test_alignment_is_the_last_layer_head_average_of_cross_attention(
    translator: Translator, tmp_path
) -> None:
    alignment = align(translator, "I like coffee.")
    _, attention = translate_with_attention(translator, "I like coffee.", translator.decode_cfg_with(nbest=1))
    torch.testing.assert_close(alignment.weights, attention.maps[AttentionKind.CROSS][-1].mean(0))
    assert (alignment.source, alignment.target) == (attention.source, attention.output)
    save_heatmap(alignment, tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heatmap_labels_its_axes_with_the_tokens(translator: Translator) -> None:
    _, attention = translate_with_attention(translator, "I like coffee.")
    rows, columns = attention.axes(AttentionKind.CROSS)
    ax = heatmap_figure(attention.maps[AttentionKind.CROSS][0, 0], rows, columns, "t").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == columns
    assert [t.get_text() for t in ax.get_yticklabels()] == rows


def test_grid_has_one_panel_per_layer_and_head(translator: Translator) -> None:
    _, attention = translate_with_attention(translator, "I like coffee.")
    cfg = translator.model.cfg
    titles = [ax.get_title() for ax in grid_figure(attention, AttentionKind.DECODER_SELF).axes]
    assert titles == [
        f"layer {layer} head {head}"
        for layer in range(1, cfg.n_decoder_layers + 1)
        for head in range(1, cfg.n_heads + 1)
    ]


def test_grid_labels_only_its_outer_panels_with_the_tokens(translator: Translator) -> None:
    _, attention = translate_with_attention(translator, "I like coffee.")
    rows, columns = attention.axes(AttentionKind.CROSS)
    cfg = translator.model.cfg
    axes = grid_figure(attention, AttentionKind.CROSS).axes
    for index, ax in enumerate(axes):
        layer, head = divmod(index, cfg.n_heads)
        expected_x = columns if layer == cfg.n_decoder_layers - 1 else []  # the bottom row
        expected_y = rows if head == 0 else []  # the first column
        assert [t.get_text() for t in ax.get_xticklabels()] == expected_x, (layer, head)
        assert [t.get_text() for t in ax.get_yticklabels()] == expected_y, (layer, head)


def test_typical_sentence_has_the_median_length(translator: Translator) -> None:
    sources = [
        "Hi.",
        "A very much longer sentence than the others here.",
        "I like coffee.",
        "Go.",
        "Tom likes tea.",
    ]
    lengths = [len(ids) for ids in translator.tokenizer.encode_source(sources)]
    chosen = typical_sentence(translator.tokenizer, sources)
    assert lengths[chosen] == statistics.median(lengths)  # an odd count: the median is one of them
    assert chosen == lengths.index(lengths[chosen])  # the first of that length: stable across validations
