"""Measurements of the project, one per script, each run from the repository root as
``python -m bench.NAME`` (docs/performance.md lists them); ``measure.py`` holds what they share."""
