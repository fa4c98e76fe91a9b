"""Training measurements: the step, precision, profile, the loop, loss curves, levers, memory."""
