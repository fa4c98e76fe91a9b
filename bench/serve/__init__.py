"""Serving measurements: the HTTP server under concurrent clients."""
