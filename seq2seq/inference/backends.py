"""One way to open a model for translation, from a checkpoint (``--ckpt``) or an export folder
(``--model``): the translator of the engine that runs it, ready with its decoding settings,
shortlist and seed, and the record of the model's facts.

translate.py, serve.py, the benchmarks and the tests all open a model here, and each file is read
once. A checkpoint runs on the PyTorch Transformer (:data:`seq2seq.formats.checkpoint.PYTORCH`); an export
folder on the backend that :data:`BACKENDS` names for its engine. Each engine's library is imported
only when its folder is opened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from seq2seq.decoding.overrides import DecodeOverrides
from seq2seq.decoding.shortlist import ShortlistError, default_path
from seq2seq.formats.checkpoint import ModelFacts, load_model
from seq2seq.formats.export_folder import CTRANSLATE2, TRANSFORMERS, load_bundle
from seq2seq.inference.shortlist import BESIDE, open_shortlist
from seq2seq.inference.translator import DEFAULT_BATCH_TOKENS, Translator, TranslatorBase
from seq2seq.machine.hardware import AUTO, INFERENCE_DTYPES, resolve_device, resolve_dtype
from seq2seq.model.int8 import INT8

EXPORT_COMPUTE = "the export's weight type"  # why an export computes in the number type it does


class Opened(NamedTuple):
    """A model ready to translate."""

    translator: TranslatorBase
    facts: ModelFacts
    compute_reason: str  # why the translator computes in its number type (`compute`), e.g. "set explicitly"


def _ctranslate2(directory: Path, facts: ModelFacts, device: str, batch_tokens: int) -> TranslatorBase:
    from seq2seq.inference.ct2_translator import CT2Translator

    return CT2Translator(directory, facts, device, batch_tokens)


def _transformers(directory: Path, facts: ModelFacts, device: str, batch_tokens: int) -> TranslatorBase:
    from seq2seq.inference.hf_translator import HFTranslator

    return HFTranslator(directory, facts, device, batch_tokens)


# engine of an export folder (seq2seq.formats.export_folder.ENGINES) -> (folder, its facts, device, batch
# tokens) -> its translator
BACKENDS: dict[str, Callable[[Path, ModelFacts, str, int], TranslatorBase]] = {
    CTRANSLATE2: _ctranslate2,
    TRANSFORMERS: _transformers,
}


class EnsembleError(ValueError):
    """Checkpoints that cannot decode together (another tokenizer); one line for the user, exit 2."""


def open_model(
    ckpt: str | Path | Sequence[str | Path] | None = None,
    model: str | Path | None = None,
    device: str = "auto",
    batch_tokens: int | None = None,
    dtype: str = AUTO,
    *,
    decode: DecodeOverrides | None = None,
    shortlist: str | Path | None = None,
    seed: int | None = None,
) -> Opened:
    """The checkpoint ``ckpt`` (several: an ensemble) or the export folder ``model`` (give one), as
    ``--ckpt``/``--model`` name them, on ``device`` ("cpu", "cuda" or "auto"), ready to translate.

    ``batch_tokens`` defaults to a checkpoint's ``data.eval_max_tokens``, as in validation, and to
    :data:`DEFAULT_BATCH_TOKENS` for an export. ``dtype`` ("auto": chosen from the hardware like the
    training precision, or a name of ``INFERENCE_DTYPES``) applies to a checkpoint; an export computes
    in its weight type; ``decode.capture`` makes "auto" float32, the captured step's only one. The
    translator decodes with the model's own settings (an ensemble's first member's) changed by
    ``decode``; ``shortlist`` (a checkpoint's only) is a shortlist file, or ``""``: the one beside the
    first checkpoint; ``seed`` seeds sampling. A bad folder is an
    :class:`~seq2seq.formats.export_folder.ExportError`; checkpoints of different tokenizers are an
    :class:`EnsembleError`.
    """
    if (ckpt is None) == (model is None):
        raise TypeError("open_model takes either ckpt or model")
    if ckpt is None and shortlist is not None:
        raise ShortlistError(
            "a shortlist needs a checkpoint: an exported model decodes over its whole vocabulary"
        )
    if ckpt is not None:
        paths = [ckpt] if isinstance(ckpt, str | Path) else list(ckpt)
        if decode is not None and decode.capture and dtype == AUTO:
            dtype = "float32"
        shortlist = default_path(paths[0]) if shortlist == BESIDE else shortlist
        opened = _open_checkpoints(paths, device, batch_tokens, dtype, shortlist)
    else:
        facts = load_bundle(model)
        translator = BACKENDS[facts.engine](Path(model), facts, device, batch_tokens or DEFAULT_BATCH_TOKENS)
        opened = Opened(translator, facts, EXPORT_COMPUTE)
    if decode is not None:
        opened.translator.decode_cfg = decode.applied_to(opened.translator.decode_cfg)
    if seed is not None:
        opened.translator.seed(seed)
    return opened


def _open_checkpoints(
    paths: list[str | Path], device: str, batch_tokens: int | None, dtype: str, shortlist: str | Path | None
) -> Opened:
    # int8 weights decode on a CPU only, so "auto" picks the CPU for them even beside a GPU
    target = resolve_device("cpu" if device == AUTO and INFERENCE_DTYPES.get(dtype) is INT8 else device)
    loaded = [load_model(path, map_location=target) for path in paths]
    first = loaded[0]
    for path, other in zip(paths[1:], loaded[1:], strict=True):
        if other.tokenizer.to_dict() != first.tokenizer.to_dict():
            raise EnsembleError(
                f"{path} and {paths[0]} have different tokenizers: an ensemble's checkpoints must share one"
            )
    compute, reason = resolve_dtype(dtype, first.model.cfg, target.type)
    batch_tokens = batch_tokens or first.data_config.eval_max_tokens
    models = [one.model for one in loaded]
    candidates = None if shortlist is None else open_shortlist(shortlist, first.tokenizer)
    translator = Translator(
        models[0] if len(models) == 1 else models, first.tokenizer, first.decode_config, target,
        batch_tokens, compute, candidates,
    )  # fmt: skip
    facts = first if len(loaded) == 1 else replace(first, name=" + ".join(one.name for one in loaded))
    return Opened(translator, facts, reason)
