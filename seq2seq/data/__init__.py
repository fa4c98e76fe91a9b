"""Data stage: corpus file -> grouped splits -> tokenizer -> ids -> token-budget batches."""
