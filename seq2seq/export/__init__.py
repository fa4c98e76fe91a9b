"""Export a trained checkpoint to an inference engine (CTranslate2, transformers): ``python -m seq2seq.export``."""
