"""The ``README.md`` model card of a transformers export: what the model is, what it was trained on
and under which license (the training data config's ``license`` and ``attribution``), how it was
trained, how well it translates, and how to use it.

Scores are measured at export, on the weights exported, with the checkpoint's own decoding
settings and ``translate.py``'s scoring (sacrebleu, every reference). What a checkpoint does not
record (the hardware, the training time) is read from the run directory when the checkpoint is
still in it, and otherwise said to be unknown rather than guessed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from seq2seq.config import ACTIVATIONS, BPE, HUGGING_FACE, ConfigError, DataError
from seq2seq.data import corpus
from seq2seq.export.transformers_class import Choice
from seq2seq.formats.checkpoint import LoadedModel, read_checkpoint
from seq2seq.inference.evaluation import evaluate
from seq2seq.inference.translator import Translator

log = logging.getLogger(__name__)

LANGUAGES = {"en": "English", "es": "Spanish"}
_VOCABULARIES = {  # data.tokenizer -> its vocabulary, as the card names it (no SentencePiece: refused)
    BPE: "byte-level BPE vocabulary",
    HUGGING_FACE: "vocabulary (a given tokenizer.json)",
}


def _run_facts(checkpoint: Path) -> list[str]:
    """Hardware, precision and training time, where the run left them."""
    config = checkpoint.resolve().parent.parent / "config.yaml"  # <run>/checkpoints/<name>.ckpt
    header = []
    if config.is_file():
        lines = config.read_text(encoding="utf-8").splitlines()
        header = [line[2:] for line in lines if line.startswith(("# hardware:", "# precision:"))]
    timer = read_checkpoint(checkpoint).get("callbacks", {}).get("Timer", {})
    seconds = timer.get("time_elapsed", {}).get("train")
    trained = f"training time: {seconds / 60:.1f} minutes" if seconds else "training time: not recorded"
    return (header or ["hardware: not recorded (the checkpoint was moved out of its run directory)"]) + [
        trained
    ]


def _scores(loaded: LoadedModel) -> list[str]:
    """BLEU and chrF of the validation and test splits, as translate.py --eval prints them."""
    translator = Translator(loaded.model, loaded.tokenizer, loaded.decode_config, dtype=torch.float32)
    search = "greedy" if loaded.decode_config.beam_size == 1 else f"beam {loaded.decode_config.beam_size}"
    try:
        splits, _ = corpus.load_splits(loaded.data_config)
    except (ConfigError, DataError, OSError) as err:
        return [f"not measured: the training corpus cannot be read here ({str(err).splitlines()[0]})"]
    rows = ["| split | sentences | BLEU | chrF | search |", "|---|---|---|---|---|"]
    signatures = []
    for split in ("valid", "test"):
        log.info("model card: scoring the %s split", split)
        sources, references = corpus.references(splits[split])
        scores = evaluate(translator, sources, references).scores
        bleu, chrf = f"{scores['bleu']:.2f}", f"{scores['chrf']:.2f}"
        rows.append(f"| {split} | {scores['count']} | {bleu} | {chrf} | {search} |")
        signatures = [f"BLEU: `{scores['bleu_signature']}`", f"chrF: `{scores['chrf_signature']}`"]
    return [*rows, "", "sacrebleu signatures, " + "; ".join(signatures) + "."]


def _loading(choice: Choice) -> list[str]:
    """Which loading path the folder needs, and why, as a paragraph and the first lines of the usage."""
    if not choice.custom_code:
        why = (
            f"`{choice.class_name}` is a class of transformers ({choice.reason}), so the Auto classes "
            "load this folder with no custom code and no flag."
        )
        return [why, "", "```python"]
    why = (
        f"No class of transformers computes this model exactly ({choice.reason}), so the folder carries "
        f"seq2seq's own, `{choice.class_name}`, in `modeling_seq2seq.py`, `layers_seq2seq.py` and "
        "`configuration_seq2seq.py` (named by `auto_map` in `config.json`). With seq2seq installed, "
        "`import seq2seq.hf` registers it and the Auto classes load the folder with no flag; without "
        "seq2seq, pass `trust_remote_code=True` to both `from_pretrained` calls (the tokenizer's reads "
        "`config.json` too), which runs those three files: read them first."
    )
    return [
        why,
        "",
        "```python",
        "import seq2seq.hf  # without seq2seq: from_pretrained(..., trust_remote_code=True)",
    ]


def _held_out(path: object, size: int) -> str:
    """A held-out set as the card names it: the file given, or what was carved out of the corpus."""
    if path is not None:
        return f"`{path}` was given"
    return f"{size} distinct source sentences (at most a tenth of the corpus's) were held out"


def model_card(loaded: LoadedModel, checkpoint: Path, choice: Choice) -> str:
    """The card's Markdown text, for a folder with ``choice``'s class."""
    data, cfg = loaded.data_config, loaded.model.cfg
    src, tgt = (LANGUAGES.get(code, code) for code in (data.source_lang, data.target_lang))
    parameters = loaded.model.num_parameters()
    norm = "pre-norm" if cfg.norm_first else "post-norm (as in the paper)"
    if cfg.qk_norm:
        norm += ", each head's queries and keys RMS-normalised (QK-norm)"
    activation = ACTIVATIONS[cfg.activation]
    positions = "learned" if cfg.learned_positions else "sinusoidal"
    data_line = data.attribution or f"`{data.path}` (no data.attribution was configured)"
    return "\n".join(
        [
            "---",
            f"language: [{data.source_lang}, {data.target_lang}]",
            f"license: {data.license or 'unknown'}",
            "library_name: transformers",
            "pipeline_tag: translation",
            "---",
            "",
            f"# {src} → {tgt} Transformer ({choice.class_name})",
            "",
            f"Translates {src} ({data.source_lang}) into {tgt} ({data.target_lang}). Trained from scratch "
            "with seq2seq, a small encoder-decoder Transformer framework, and exported to transformers: "
            "`AutoModelForSeq2SeqLM` and `generate()` give the translations of seq2seq's `translate.py`.",
            "",
            "## Data",
            "",
            f"{data_line}. Pairs longer than {data.max_length} tokens were left out; "
            f"{_held_out(data.valid_path, data.valid_size)} for validation and "
            f"{_held_out(data.test_path, data.test_size)} for test.",
            "",
            "## Model",
            "",
            f"Encoder-decoder Transformer, {parameters / 1e6:.2f} M parameters: d_model {cfg.d_model}, "
            f"{cfg.n_encoder_layers} encoder and {cfg.n_decoder_layers} decoder layers, {cfg.n_heads} "
            f"heads, feed-forward {cfg.d_ff} ({activation}), {norm}, {positions} positions up to "
            f"{cfg.max_positions}, a shared {_VOCABULARIES[data.tokenizer]} of "
            f"{loaded.tokenizer.tgt_vocab_size} tokens{', tied embeddings' if cfg.tie_embeddings else ''}.",
            "",
            "## Training",
            "",
            f"{loaded.global_step if loaded.global_step is not None else 'unknown'} optimizer steps; "
            f"best validation BLEU during training "
            f"{'unknown' if loaded.best_bleu is None else f'{loaded.best_bleu:.2f}'}.",
            "",
            *[f"- {fact}" for fact in _run_facts(checkpoint)],
            "",
            "## Results",
            "",
            "Measured at export, in float32, on the exported weights (sacrebleu, every reference):",
            "",
            *_scores(loaded),
            "",
            "## Usage",
            "",
            *_loading(choice),
            "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
            "",
            'tokenizer = AutoTokenizer.from_pretrained("THIS_FOLDER")',
            'model = AutoModelForSeq2SeqLM.from_pretrained("THIS_FOLDER")',
            'batch = tokenizer(["How are you?"], return_tensors="pt", padding=True)',
            "out = model.generate(**batch, num_beams=5, max_new_tokens=64)",
            "print(tokenizer.batch_decode(out, skip_special_tokens=True))",
            "```",
            "",
            "Greedy `generate()` gives `translate.py`'s translations. With `num_beams`, transformers "
            "ranks finished beams by log-probability / length^α, `translate.py` by GNMT's "
            "((5 + length) / 6)^α, so a few beam outputs differ.",
            "",
        ]
    )
