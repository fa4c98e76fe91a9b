"""``python -m seq2seq.data.build``: the deprecated name of ``python -m seq2seq.data.streamed.build``."""

import sys

from seq2seq.command_line import moved
from seq2seq.data.streamed.build import main

if __name__ == "__main__":
    moved("seq2seq.data.build", "seq2seq.data.streamed.build")
    sys.exit(main())
