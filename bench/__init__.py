"""Measurements of the project, each run from the repository root as ``python -m bench.FAMILY.NAME``
(docs/performance.md lists them): one folder per family (``train``, ``decode``, ``data``, ``serve``),
one measurement per script, and ``lib/`` for what they share."""
