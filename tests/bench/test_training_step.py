"""bench/lib/training_step.py: the batches the training-step benchmarks time."""

from bench.lib.training_step import static_batches
from tests.helpers.tiny import CORPUS, tiny_tokenizer


def test_the_benchmarks_static_batches_have_the_runs_shapes() -> None:
    """``bench.train.step --capture`` times batches as ``data.static_shapes`` makes them."""
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    sources, targets = [source for source, _ in pairs], [target for _, target in pairs]
    batches = static_batches((tiny_tokenizer(), sources, targets), 256, 4)
    assert len(batches) == 4 and len({batch.src.shape for batch in batches}) > 1
    for batch in batches:
        rows, length = batch.src.shape
        assert batch.tgt_in.shape == (rows, length) and rows == 256 // length
