"""Our weights onto transformers' ``MarianMTModel`` (post-norm) or ``PegasusForConditionalGeneration``
(pre-norm, with a final layer norm on each side), for the models they compute.

Both scale embeddings by √d_model, add a sinusoidal table from position 0, and put biases where
ours are, so each weight has one place, and both load with no custom code. One difference is a
relabelling: their sinusoidal table holds all sines in the first half of the features and all
cosines in the second, ours interleaves them. Permuting the d_model features of every weight that
reads or writes the residual stream (:func:`residual_permutation`) gives the same function: layer
norms, residual additions and attention are indifferent to the order of those features.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seq2seq.config import ModelConfig
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.formats.export_folder import ExportError
from seq2seq.model import Transformer
from seq2seq.model.transformer import sinusoidal_table


def residual_permutation(d_model: int) -> Tensor:
    """Feature order of the Marian/Pegasus table in ours: [0, 2, 4, ..., 1, 3, 5, ...] (sin, then cos)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def hf_config(cfg: ModelConfig, vocab_size: int):  # -> MarianConfig | PegasusConfig
    """The transformers config of the same shape; post-norm -> Marian, pre-norm -> Pegasus."""
    from transformers import MarianConfig, PegasusConfig

    kind = PegasusConfig if cfg.norm_first else MarianConfig
    shape = {
        "vocab_size": vocab_size,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.n_encoder_layers,
        "decoder_layers": cfg.n_decoder_layers,
        "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff,
        "max_position_embeddings": cfg.max_positions,
        "activation_function": cfg.activation,
        "scale_embedding": True,
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.dropout,
        "pad_token_id": PAD_ID,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "decoder_start_token_id": BOS_ID,  # Marian's and Pegasus' default is pad: ours starts from BOS
        "forced_eos_token_id": None,  # ours stops at the length limit without forcing EOS there
        "tie_word_embeddings": cfg.tie_embeddings,
    }
    if not cfg.norm_first:
        shape["share_encoder_decoder_embeddings"] = cfg.tie_embeddings
    return kind(**shape)


def hf_state_dict(model: Transformer) -> dict[str, Tensor]:
    """Our weights under Marian's/Pegasus' names, residual features permuted (see the module doc)."""
    cfg = model.cfg
    perm = residual_permutation(cfg.d_model)
    d = cfg.d_model
    state: dict[str, Tensor] = {}

    def linear(name: str, layer: torch.nn.Linear, reads: bool, writes: bool) -> None:
        weight, bias = layer.weight.detach(), layer.bias.detach()
        if reads:
            weight = weight[:, perm]
        if writes:
            weight, bias = weight[perm], bias[perm]
        state[f"{name}.weight"], state[f"{name}.bias"] = weight, bias

    def norm(name: str, layer: torch.nn.LayerNorm) -> None:
        state[f"{name}.weight"] = layer.weight.detach()[perm]
        state[f"{name}.bias"] = layer.bias.detach()[perm]

    def attention(name: str, attn) -> None:
        linear(f"{name}.q_proj", attn.q_proj, reads=True, writes=False)
        kv_weight, kv_bias = attn.kv_proj.weight.detach(), attn.kv_proj.bias.detach()  # (2D, D): K, V rows
        for i, side in enumerate(("k_proj", "v_proj")):
            state[f"{name}.{side}.weight"] = kv_weight[i * d : (i + 1) * d][:, perm]
            state[f"{name}.{side}.bias"] = kv_bias[i * d : (i + 1) * d]
        linear(f"{name}.out_proj", attn.out_proj, reads=False, writes=True)

    def feed_forward(name: str, ffn) -> None:
        # net = Linear, ReLU or GELU, Dropout, Linear
        linear(f"{name}.fc1", ffn.net[0], reads=True, writes=False)
        linear(f"{name}.fc2", ffn.net[3], reads=False, writes=True)

    for i, layer in enumerate(model.encoder_layers):
        name = f"model.encoder.layers.{i}"
        attention(f"{name}.self_attn", layer.self_attn)
        norm(f"{name}.self_attn_layer_norm", layer.attn_block.norm)
        feed_forward(name, layer.ffn)
        norm(f"{name}.final_layer_norm", layer.ffn_block.norm)
    for i, layer in enumerate(model.decoder_layers):
        name = f"model.decoder.layers.{i}"
        attention(f"{name}.self_attn", layer.self_attn)
        norm(f"{name}.self_attn_layer_norm", layer.self_block.norm)
        attention(f"{name}.encoder_attn", layer.cross_attn)
        norm(f"{name}.encoder_attn_layer_norm", layer.cross_block.norm)
        feed_forward(name, layer.ffn)
        norm(f"{name}.final_layer_norm", layer.ffn_block.norm)
    if cfg.norm_first:
        norm("model.encoder.layer_norm", model.encoder_norm)
        norm("model.decoder.layer_norm", model.decoder_norm)

    src, tgt = (embed.tokens.weight.detach()[:, perm] for embed in (model.src_embed, model.tgt_embed))
    state["model.encoder.embed_tokens.weight"], state["model.decoder.embed_tokens.weight"] = src, tgt
    if cfg.tie_embeddings:
        state["model.shared.weight"] = src
    state["lm_head.weight"] = model.generator.weight.detach()[:, perm]
    state["final_logits_bias"] = torch.zeros(1, tgt.size(0))
    return state  # the sinusoidal tables are transformers' own: see build_hf_model


def build_hf_model(model: Transformer):  # -> MarianMTModel | PegasusForConditionalGeneration
    """The transformers model computing what ``model`` computes, in eval mode."""
    from transformers import MarianMTModel, PegasusForConditionalGeneration

    config = hf_config(model.cfg, model.generator.out_features)
    hf = (PegasusForConditionalGeneration if model.cfg.norm_first else MarianMTModel)(config)
    state = hf_state_dict(model)
    tables = {f"model.{side}.embed_positions.weight" for side in ("encoder", "decoder")}
    expected = hf.state_dict()
    unknown = sorted(set(state) - set(expected))
    left = sorted(set(expected) - set(state) - tables)
    if unknown or left:  # a transformers release that renamed a weight: say so, write nothing
        raise ExportError(f"transformers {type(hf).__name__} has other weights: {(unknown + left)[:4]}")
    ours = sinusoidal_table(model.cfg.max_positions, model.cfg.d_model)[
        :, residual_permutation(model.cfg.d_model)
    ]
    if any(not torch.allclose(expected[name], ours, atol=1e-5) for name in tables):
        raise ExportError(
            f"transformers {type(hf).__name__} has another sinusoidal table than ours, permuted"
        )
    hf.load_state_dict({name: tensor.contiguous() for name, tensor in state.items()}, strict=False)
    return hf.eval()
