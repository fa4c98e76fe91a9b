"""Serving stage: the HTTP app, the dynamic batcher in front of the model, metrics, and the web page."""
