"""The translation tokenizer: BPE trained here, or a given tokenizer.json or SentencePiece model."""
