"""What the tests share besides conftest.py's fixtures: the tiny corpus, composed configs, trained
checkpoints, commands run in-process."""
