"""The tiny fixture corpus and its tokenizer, for tests that build their own objects from them."""

from pathlib import Path

from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer

CORPUS = Path(__file__).parents[1] / "fixtures" / "tiny.tsv"
STEP, BLEU = 7, 12.34  # what the tiny checkpoint claims about its training, for /info and startup lines


def tiny_tokenizer(vocab_size: int = 300) -> TranslationTokenizer:
    """A shared byte-level BPE tokenizer trained on ``fixtures/tiny.tsv`` (300 pairs)."""
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    return TranslationTokenizer.train(
        (s for s, _ in pairs), (t for _, t in pairs), vocab_size=vocab_size, shared=True
    )
