"""From ``python train.py`` to a validated run in a claimed directory: the command line as Hydra
reads it, the hardware's recipe, the launch planned with every job composed and checked once, the
processes of a launch, the run directory, and the start itself (:mod:`seq2seq.launch.start`, which
says the order)."""
