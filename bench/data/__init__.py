"""Data measurements: the pipeline's start, padding, and the streamed store against in-memory data."""
