"""``python -m seq2seq.serve --ckpt model.ckpt``: the server of ``serve.py``, from an installed package."""

import sys

from seq2seq.serving.cli import main

if __name__ == "__main__":
    sys.exit(main())
