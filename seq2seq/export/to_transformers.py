"""Export to Hugging Face transformers: a folder that ``AutoModelForSeq2SeqLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load, and whose ``generate()`` translates as ``translate.py`` does.
The class is chosen per model (:mod:`seq2seq.export.transformers_class`), and the command says which.

Post-norm models with a ReLU or GELU feed-forward and sinusoidal positions become ``MarianMTModel``;
pre-norm ones with tied embeddings ``PegasusForConditionalGeneration``, which is pre-norm with a
final layer norm on each side. Both scale embeddings by √d_model, add a sinusoidal table from
position 0, and put biases where ours are, so each weight has one place, and both load with no
custom code. One difference is a relabelling: their sinusoidal table holds all sines in the first
half of the features and all cosines in the second, ours interleaves them. Permuting the d_model
features of every weight that reads or writes the residual stream (:func:`residual_permutation`)
gives the same function: layer norms, residual additions and attention are indifferent to the
order of those features.

Every other model (a SwiGLU feed-forward, learned positions, pre-norm with untied embeddings)
becomes seq2seq's own class (:mod:`seq2seq.hf`), whose weights carry our own names
(:func:`own_state_dict`); the folder holds its two source files and an ``auto_map``, so it loads
with ``trust_remote_code=True`` where seq2seq is not installed, and after ``import seq2seq.hf``
where it is.
"""

from __future__ import annotations

import inspect
import json
import shutil
import sys
from pathlib import Path

import torch
from torch import Tensor

from seq2seq.config import SENTENCEPIECE, ModelConfig
from seq2seq.data.tokenizers.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    TranslationTokenizer,
)
from seq2seq.export.model_card import model_card
from seq2seq.export.transformers_class import choose_class
from seq2seq.formats.checkpoint import LoadedModel, load_model
from seq2seq.formats.export_folder import (
    TRANSFORMERS,
    ExportError,
    check_export_target,
    save_bundle,
    staged_directory,
)
from seq2seq.model import Transformer
from seq2seq.model.transformer import sinusoidal_table

# Our state-dict prefixes -> the own class's; inside a layer the names are the same.
OWN_PREFIXES = {
    "src_embed.": "encoder.embed.",
    "encoder_layers.": "encoder.layers.",
    "encoder_norm.": "encoder.norm.",
    "tgt_embed.": "decoder.embed.",
    "decoder_layers.": "decoder.layers.",
    "decoder_norm.": "decoder.norm.",
    "generator.": "generator.",
}
TIED_COPIES = ("tgt_embed.tokens.weight", "generator.weight")  # src_embed.tokens.weight, when tied
OWN_CONFIG_FIELDS = (  # ModelConfig's fields that the own class's config carries under the same name
    "d_model", "n_heads", "n_encoder_layers", "n_decoder_layers", "d_ff", "activation", "max_positions",
    "learned_positions", "norm_first", "qk_norm", "tie_embeddings", "dropout", "attention_dropout",
)  # fmt: skip


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


def own_state_dict(model: Transformer) -> dict[str, Tensor]:
    """Our weights under the own class's names: our prefixes renamed, tied copies kept once."""
    state = {}
    for name, tensor in model.state_dict().items():
        if model.cfg.tie_embeddings and name in TIED_COPIES:
            continue
        prefix = next((p for p in OWN_PREFIXES if name.startswith(p)), None)
        if prefix is None:
            raise ExportError(f"seq2seq's transformers class has no place for the weight {name}")
        state[OWN_PREFIXES[prefix] + name.removeprefix(prefix)] = tensor.detach()
    return state


def build_own_model(model: Transformer):  # -> seq2seq.hf.Seq2SeqTransformerForConditionalGeneration
    """seq2seq's own transformers class with ``model``'s weights, in eval mode."""
    from seq2seq.hf import Seq2SeqTransformerConfig, Seq2SeqTransformerForConditionalGeneration

    cfg = model.cfg
    config = Seq2SeqTransformerConfig(
        vocab_size=model.generator.out_features,
        **{name: getattr(cfg, name) for name in OWN_CONFIG_FIELDS},
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        auto_map={  # each class by its file in the folder (see save_own_code)
            "AutoConfig": _code_reference(Seq2SeqTransformerConfig),
            "AutoModelForSeq2SeqLM": _code_reference(Seq2SeqTransformerForConditionalGeneration),
        },
    )
    hf = Seq2SeqTransformerForConditionalGeneration(config)
    try:
        hf.load_state_dict(own_state_dict(model), strict=True)
    except RuntimeError as err:  # a weight renamed on one side only: say so, write nothing
        raise ExportError(
            f"seq2seq's transformers class has other weights: {str(err).splitlines()[1].strip()}"
        ) from err
    return hf.eval()


def generation_settings(loaded: LoadedModel) -> dict:
    """``generation_config.json``: start, stop and banned tokens, and the checkpoint's search."""
    decode = loaded.decode_config
    return {
        "decoder_start_token_id": BOS_ID,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "forced_eos_token_id": None,
        "suppress_tokens": [PAD_ID, BOS_ID],  # never in an output of ours
        "max_new_tokens": loaded.model.cfg.max_positions - 1,  # the table's positions, BOS included
        "num_beams": decode.beam_size,
        "do_sample": False,
    }


def save_tokenizer(tokenizer: TranslationTokenizer, directory: Path) -> None:
    """``tokenizer.json`` that appends EOS to a source (as translate.py does) and its config.

    Our own loader reads the same file: it encodes with ``add_special_tokens=False``, which skips
    the template, and adds EOS itself. The config names the generic fast tokenizer class, which
    transformers 4.x and 5.x both load.
    """
    from tokenizers import Tokenizer, processors

    hf_tokenizer = Tokenizer.from_str(tokenizer.src.to_str())
    eos = SPECIAL_TOKENS[EOS_ID]
    hf_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A $B {eos}", special_tokens=[(eos, EOS_ID)]
    )
    hf_tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": eos,
        "pad_token": SPECIAL_TOKENS[PAD_ID],
        "unk_token": SPECIAL_TOKENS[UNK_ID],
        "model_max_length": 1_000_000,  # translate.py cuts long inputs itself; generate() does not
        "clean_up_tokenization_spaces": False,  # 4.x would otherwise glue " ." into "."
        "model_input_names": ["input_ids", "attention_mask"],  # 4.x adds token_type_ids, which Marian refuses
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def export_to_transformers(checkpoint: str | Path, out_dir: str | Path, force: bool = False) -> Path:
    """Write ``checkpoint`` as a transformers folder (see the module doc) into ``out_dir``, and say on
    stderr which class it got and why.

    A tokenizer per side, which AutoTokenizer cannot load as one, stops with one line before
    anything is written; ``out_dir`` is replaced at the end only.
    """
    out_dir = Path(out_dir)
    check_export_target(out_dir, force)
    loaded = load_model(checkpoint)
    if loaded.tokenizer.format == SENTENCEPIECE:
        raise ExportError(
            "transformers cannot load this model's tokenizer: a SentencePiece model, where AutoTokenizer "
            "here loads a tokenizer.json (export --to ctranslate2, or train with data.tokenizer=huggingface)"
        )
    if not loaded.tokenizer.shared:
        raise ExportError(
            "transformers cannot load this model's tokenizers: separate source and target vocabularies "
            "(AutoTokenizer loads one tokenizer.json for both the input and the output of generate())"
        )
    try:
        from transformers import GenerationConfig
    except ImportError as err:
        raise ExportError("exporting to transformers needs: pip install -e '.[hf]'") from err
    choice = choose_class(loaded.model.cfg)
    hf = (build_own_model if choice.custom_code else build_hf_model)(loaded.model)
    hf.generation_config = GenerationConfig(**generation_settings(loaded))
    with staged_directory(out_dir) as stage:
        hf.save_pretrained(stage)
        if choice.custom_code:
            save_own_code(stage, hf)
        save_bundle(stage, loaded, "float32", str(checkpoint), TRANSFORMERS)  # seq2seq.json, tokenizer
        save_tokenizer(loaded.tokenizer, stage)  # the same vocabulary, with the EOS template
        card = model_card(loaded, Path(checkpoint), choice)
        (stage / "README.md").write_text(card, encoding="utf-8")
    print(choice.line(), file=sys.stderr)
    return out_dir


def _code_reference(cls: type) -> str:
    """``auto_map``'s name for ``cls``: ``<file name without .py>.<class name>``."""
    return f"{Path(inspect.getfile(cls)).stem}.{cls.__name__}"


def save_own_code(directory: Path, model) -> None:
    """The source files of ``model``'s class and config class, which ``auto_map`` names."""
    for cls in (type(model), type(model.config)):
        shutil.copyfile(inspect.getfile(cls), directory / Path(inspect.getfile(cls)).name)
