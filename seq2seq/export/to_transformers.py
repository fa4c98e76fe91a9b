"""Export to Hugging Face transformers: a folder that ``AutoModelForSeq2SeqLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load, and whose ``generate()`` translates as ``translate.py`` does.
The class is chosen per model (:mod:`seq2seq.export.transformers_class`), and the command says which.

Post-norm models with a ReLU or GELU feed-forward and sinusoidal positions become ``MarianMTModel``;
pre-norm ones with tied embeddings ``PegasusForConditionalGeneration``, which load with no custom
code (:mod:`seq2seq.export.marian_pegasus` puts our weights on them).

Every other model (a SwiGLU feed-forward, learned positions, pre-norm with untied embeddings)
becomes seq2seq's own class (:mod:`seq2seq.hf`), whose weights carry our own names
(:func:`own_state_dict`); the folder holds its source files and an ``auto_map``, so it loads
with ``trust_remote_code=True`` where seq2seq is not installed, and after ``import seq2seq.hf``
where it is.
"""

from __future__ import annotations

import inspect
import json
import shutil
import sys
from pathlib import Path

from torch import Tensor

from seq2seq.config import SENTENCEPIECE
from seq2seq.data.tokenizers.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    TranslationTokenizer,
)
from seq2seq.export.marian_pegasus import build_hf_model
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
    """The source files of ``model``'s class: its folder's modules (the class, its layers and its
    config, which ``auto_map`` names), which import one another and no seq2seq."""
    for source in sorted(Path(inspect.getfile(type(model))).parent.glob("*.py")):
        if source.name != "__init__.py":
            shutil.copyfile(source, directory / source.name)
