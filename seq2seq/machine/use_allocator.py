"""Imported first by ``train.py``: the command restarts under the allocator that
:mod:`seq2seq.machine.memory` wants; kept apart so that importing the functions restarts nothing."""

from seq2seq.machine.memory import preload_allocator

preload_allocator()
