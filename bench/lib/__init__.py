"""What the benchmarks share: timings and records, the training step and loop, decoders, a corpus."""
