"""Inference stage: checkpoint -> :class:`Translator` -> strings, the CLI, evaluation, attention views."""
