"""Export a trained checkpoint to an engine (CTranslate2, transformers): ``python -m seq2seq.export``."""
