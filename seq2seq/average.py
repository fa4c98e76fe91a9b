"""``python -m seq2seq.average``: the deprecated name of ``python -m seq2seq.training.average``."""

import sys

from seq2seq.command_line import moved
from seq2seq.training.average import main

if __name__ == "__main__":
    moved("seq2seq.average", "seq2seq.training.average")
    sys.exit(main())
