"""``serve.py``'s bad arguments: one line on stderr, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from seq2seq.serving.cli import main as serve_main
from tests.helpers.bad_input import one_line


@pytest.mark.parametrize("wait", ["inf", "nan", "-1"])
def test_serve_refuses_a_batching_wait_that_is_not_a_finite_number_at_least_0(
    checkpoint: Path, capsys, wait: str
) -> None:
    """An infinite wait once killed the batcher's thread at the first request, and the request hung."""
    assert serve_main(["--ckpt", str(checkpoint), "--max-wait-ms", wait]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"serve.py: error: --max-wait-ms must be a finite number >= 0, got {float(wait)} (see --help)"
    )
