"""The machine a command runs on: hardware and precision, CPU flags, OpenMP's wait, the allocator."""
