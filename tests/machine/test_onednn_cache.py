"""oneDNN's primitive cache for training: kept small, unless the user set it, before torch loads."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from seq2seq.machine.onednn_cache import TRAINING_CAPACITY, VARIABLE, primitive_cache
from tests.helpers.compose import ROOT


def test_training_keeps_a_small_cache_unless_the_user_chose_one() -> None:
    assert primitive_cache({}) == {VARIABLE: str(TRAINING_CAPACITY)}
    assert primitive_cache({VARIABLE: "1024"}) == {}


def test_importing_it_sets_the_variable_in_this_process() -> None:
    env = {key: value for key, value in os.environ.items() if key != VARIABLE}
    show = f"import os, seq2seq.machine.onednn_cache; print(os.environ[{VARIABLE!r}])"
    for given, expected in ((None, str(TRAINING_CAPACITY)), ("8", "8")):
        run_env = env if given is None else {**env, VARIABLE: given}
        done = subprocess.run([sys.executable, "-c", show], env=run_env, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.strip() == expected, done.stderr


def test_train_py_imports_it_before_anything_that_loads_torch() -> None:
    imports = [
        alias.name
        for node in ast.parse((ROOT / "train.py").read_text()).body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    ]
    assert imports.index("seq2seq.machine.onednn_cache") < imports.index("seq2seq.machine.use_allocator")
    assert imports.index("seq2seq.machine.onednn_cache") < imports.index("seq2seq.launch.start")
