"""Export a trained checkpoint to an inference engine (CTranslate2): ``python -m seq2seq.export``."""
