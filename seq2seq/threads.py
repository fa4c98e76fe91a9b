"""OpenMP's passive wait policy for training and decoding; import this before torch loads OpenMP.

PyTorch's CPU kernels run on OpenMP threads. By default (GNU libgomp) a thread that has done its
share of a parallel region spins for a while before it sleeps. On an idle machine that saves a
wake-up; when another process wants the same cores, the spinning threads take CPU time from the
thread that is still working, and every region waits for the slowest one. ``PASSIVE`` makes waiting
threads sleep at once (``bench/train_step.py --contention``). Decoding runs hundreds of small ops
per step, so it suffers more (``bench/decode.py --peer``; both measured in docs/performance.md).
libgomp reads the variable once, when torch's library loads, hence the import order; a value
already in the environment is kept, so ``OMP_WAIT_POLICY=ACTIVE python train.py`` restores
spinning.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
