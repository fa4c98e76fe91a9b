"""The encoder-decoder Transformer, written with plain torch."""

from seq2seq.model.transformer import DecoderCache, Transformer

__all__ = ["DecoderCache", "Transformer"]
