"""Decoding measurements: KV cache, dtypes, shortlist, exports, Marian, peers, profile, wait policy."""
