"""Imported first by ``train.py``: the command restarts under jemalloc where it is installed
(:mod:`seq2seq.machine.memory`); kept apart so that importing the functions restarts nothing."""

from seq2seq.machine.memory import preload_jemalloc

preload_jemalloc()
