"""A trained Transformer as a CTranslate2 ``TransformerSpec``, written with the project's tokenizer.

CTranslate2 builds its model from a spec: layer counts, heads, pre- or post-norm and the
activation up front, then every weight by name. The mapping below is exact for every model
this project can train:

- CTranslate2 fuses the self-attention Q, K and V projections into one matrix, and cross-attention
  K and V into another; ours keep Q apart and K, V fused in that order, so rows concatenate.
- Sinusoidal positions are written as an explicit table: CTranslate2's built-in one puts all sines
  before all cosines, ours interleave them. Learned positions go the same way.
- Embeddings are scaled by √d_model in both. The LayerNorm epsilon is ours (CTranslate2 has its own
  default). Tied embeddings are written three times; CTranslate2 stores one copy.
- The FFN activation is ReLU, exact GELU or SwiGLU; SwiGLU is CTranslate2's gated FFN with SiLU
  (swish), our gate_proj its activated linear_0, our up_proj its linear_0_noact.
- Sources carry EOS but no BOS and the decoder starts from BOS, as here: the specials keep their ids.

Every weight of the model must land in the spec; one that does not (a layer this exporter does not
know) stops the export with an error that names it, instead of a model that silently differs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ctranslate2.specs import attention_spec, common_spec, transformer_spec
from torch import Tensor, nn

from seq2seq.config import GELU, RELU, SWIGLU
from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID, SPECIAL_TOKENS, UNK_ID, TranslationTokenizer
from seq2seq.formats.checkpoint import LoadedModel, load_model
from seq2seq.formats.export_folder import (
    CTRANSLATE2,
    ExportError,
    check_export_target,
    save_bundle,
    staged_directory,
)
from seq2seq.model import Transformer

QUANTIZATIONS = ("int8", "int8_float32", "float32", "float16", "bfloat16")  # weight types on export
CT2_ACTIVATIONS = {  # model.activation -> CTranslate2's; GELU is the exact (erf) one in both
    RELU: common_spec.Activation.RELU,
    GELU: common_spec.Activation.GELU,
    SWIGLU: common_spec.Activation.SWISH,  # with ffn_glu: SiLU(gate) * up
}


class _Weights:
    """The model's tensors by state-dict name, as float32 arrays, remembering which ones were taken."""

    def __init__(self, model: Transformer) -> None:
        self.tensors: dict[str, Tensor] = model.state_dict()
        self.taken: set[str] = set()

    def __call__(self, *names: str) -> np.ndarray:
        """The named tensors concatenated along their first dimension (rows of a linear layer)."""
        self.taken.update(names)
        return np.concatenate([self.tensors[name].detach().float().cpu().numpy() for name in names])

    def left_over(self) -> list[str]:
        return sorted(set(self.tensors) - self.taken)


def _linear(spec: common_spec.LinearSpec, w: _Weights, *names: str, bias: bool = True) -> None:
    """Weights (out, in) of the named linear layers, stacked by output rows, as torch stores them."""
    spec.weight = w(*(f"{name}.weight" for name in names))
    if bias:
        spec.bias = w(*(f"{name}.bias" for name in names))


def _norm(spec: common_spec.LayerNormSpec, w: _Weights, name: str) -> None:
    spec.gamma = w(f"{name}.weight")
    spec.beta = w(f"{name}.bias")


def _attention(spec: attention_spec.MultiHeadAttentionSpec, w: _Weights, name: str, norm: str) -> None:
    """Self-attention: linear[0] = [Q; K; V]. Cross-attention: linear[0] = Q, linear[1] = [K; V]."""
    if len(spec.linear) == 2:
        _linear(spec.linear[0], w, f"{name}.q_proj", f"{name}.kv_proj")
    else:
        _linear(spec.linear[0], w, f"{name}.q_proj")
        _linear(spec.linear[1], w, f"{name}.kv_proj")
    _linear(spec.linear[-1], w, f"{name}.out_proj")
    _norm(spec.layer_norm, w, norm)


def _feed_forward(spec: transformer_spec.FeedForwardSpec, w: _Weights, name: str, norm: str) -> None:
    """CTranslate2 applies the activation to linear_0 and, in a GLU, multiplies by linear_0_noact."""
    if hasattr(spec, "linear_0_noact"):  # SwiGLU: gate_proj, up_proj, down_proj
        _linear(spec.linear_0, w, f"{name}.gate_proj")
        _linear(spec.linear_0_noact, w, f"{name}.up_proj")
        _linear(spec.linear_1, w, f"{name}.down_proj")
    else:  # net = Linear, ReLU or GELU, Dropout, Linear
        _linear(spec.linear_0, w, f"{name}.net.0")
        _linear(spec.linear_1, w, f"{name}.net.3")
    _norm(spec.layer_norm, w, norm)


def _positions(model: Transformer, w: _Weights, side: str) -> np.ndarray:
    """The (max_positions, D) table added to the embeddings: learned, or the sinusoidal buffer."""
    embed = getattr(model, f"{side}_embed")
    if embed.positions is not None:
        return w(f"{side}_embed.positions")
    return embed.table.float().cpu().numpy()


def _layer_norm_eps(model: Transformer) -> float:
    epsilons = {module.eps for module in model.modules() if isinstance(module, nn.LayerNorm)}
    if len(epsilons) != 1:
        raise ExportError(f"CTranslate2 takes one LayerNorm epsilon, the model has {sorted(epsilons)}")
    return epsilons.pop()


def _vocabulary(tokenizer: TranslationTokenizer, side: str, size: int) -> list[str]:
    """Token strings by id; CTranslate2 maps tokens by string, so they must be unique, and it names
    the special tokens once for both sides (a given SentencePiece model names its own)."""
    tokens = [getattr(tokenizer, side).id_to_token(i) for i in range(size)]
    specials = [tokenizer.src.id_to_token(i) for i in range(len(SPECIAL_TOKENS))]
    if tokens[: len(SPECIAL_TOKENS)] != specials:
        raise ExportError(f"the {side} vocabulary does not start with the special tokens {specials}")
    if None in tokens or len(set(tokens)) != len(tokens):
        raise ExportError(f"the {side} vocabulary has missing or repeated token strings")
    return tokens


def build_spec(model: Transformer, tokenizer: TranslationTokenizer) -> transformer_spec.TransformerSpec:
    """The CTranslate2 spec of ``model`` with every weight set; raises ExportError if one has no place."""
    cfg = model.cfg
    if cfg.qk_norm:  # its spec takes QK-norm weights, but the log-probabilities then differ from ours
        raise ExportError(
            "CTranslate2's encoder-decoder Transformer does not compute QK-norm as this model does;"
            " export it with --to transformers"
        )
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers),
        cfg.n_heads,
        pre_norm=cfg.norm_first,  # pre-norm adds the final encoder/decoder LayerNorm, as ours does
        activation=CT2_ACTIVATIONS[cfg.activation],
        ffn_glu=cfg.activation == SWIGLU,
    )
    config = spec.config
    config.layer_norm_epsilon = _layer_norm_eps(model)
    name = tokenizer.src.id_to_token  # the special tokens' names, the same on both sides (_vocabulary)
    config.unk_token, config.eos_token = name(UNK_ID), name(EOS_ID)
    config.bos_token = config.decoder_start_token = name(BOS_ID)
    config.add_source_bos, config.add_source_eos = False, False  # the translator appends EOS itself

    w = _Weights(model)
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = w("src_embed.tokens.weight")
    decoder.embeddings.weight = w("tgt_embed.tokens.weight")
    encoder.position_encodings.encodings = _positions(model, w, "src")
    decoder.position_encodings.encodings = _positions(model, w, "tgt")
    for i, layer in enumerate(encoder.layer):
        name = f"encoder_layers.{i}"
        _attention(layer.self_attention, w, f"{name}.self_attn", f"{name}.attn_block.norm")
        _feed_forward(layer.ffn, w, f"{name}.ffn", f"{name}.ffn_block.norm")
    for i, layer in enumerate(decoder.layer):
        name = f"decoder_layers.{i}"
        _attention(layer.self_attention, w, f"{name}.self_attn", f"{name}.self_block.norm")
        _attention(layer.attention, w, f"{name}.cross_attn", f"{name}.cross_block.norm")
        _feed_forward(layer.ffn, w, f"{name}.ffn", f"{name}.ffn_block.norm")
    if cfg.norm_first:
        _norm(encoder.layer_norm, w, "encoder_norm")
        _norm(decoder.layer_norm, w, "decoder_norm")
    _linear(decoder.projection, w, "generator", bias=False)
    if left := w.left_over():
        raise ExportError(
            f"the CTranslate2 Transformer spec has no place for these weights: {', '.join(left)}"
        )

    spec.register_source_vocabulary(_vocabulary(tokenizer, "src", tokenizer.src_vocab_size))
    spec.register_target_vocabulary(_vocabulary(tokenizer, "tgt", tokenizer.tgt_vocab_size))
    return spec


def export_checkpoint(
    checkpoint: str | Path, out_dir: str | Path, quantization: str = "int8", force: bool = False
) -> Path:
    """Write ``checkpoint``'s model as a CTranslate2 model with its tokenizer and configs into ``out_dir``.

    ``out_dir`` must be new, empty, or (with ``force``) an earlier export; it is replaced at the end
    only, so a failure leaves it as it was.
    """
    out_dir = Path(out_dir)
    check_export_target(out_dir, force)  # before the seconds of loading
    return export_model(load_model(checkpoint), out_dir, quantization, force, source=str(checkpoint))


def export_model(
    loaded: LoadedModel,
    out_dir: str | Path,
    quantization: str = "int8",
    force: bool = False,
    source: str = "",
) -> Path:
    """Write an in-memory model (e.g. a benchmark's) like :func:`export_checkpoint`; ``source`` names it."""
    out_dir = Path(out_dir)
    if quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    check_export_target(out_dir, force)
    spec = build_spec(loaded.model, loaded.tokenizer)
    try:
        spec.validate()
    except ValueError as err:
        raise ExportError(f"CTranslate2 rejected the model: {str(err).splitlines()[0]}") from err
    spec.optimize(quantization=quantization)
    with staged_directory(out_dir) as stage:
        spec.save(str(stage))
        save_bundle(stage, loaded, quantization, source, CTRANSLATE2)
    return out_dir
