"""An export folder as a translator: the backend its ``seq2seq.json`` names, for translate.py and
the server alike. Each engine's library is imported only when its folder is loaded."""

from __future__ import annotations

from pathlib import Path

from seq2seq.export.bundle import load_bundle
from seq2seq.inference.translator import DEFAULT_BATCH_TOKENS, TranslatorBase


def load_export(
    directory: str | Path, device: str = "auto", batch_tokens: int = DEFAULT_BATCH_TOKENS
) -> TranslatorBase:
    """A CTranslate2 or transformers export, ready to translate; every failure is an ExportError."""
    if load_bundle(directory).engine == "transformers":
        from seq2seq.inference.hf_translator import HFTranslator

        return HFTranslator(directory, device, batch_tokens)
    from seq2seq.inference.ct2_translator import CT2Translator

    return CT2Translator(directory, device, batch_tokens)
