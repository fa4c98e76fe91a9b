"""OpenMP's wait policy per entry point: read by libgomp when torch loads, so set before that."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from seq2seq.machine.threads import wait_policy
from tests.helpers.compose import ROOT


def test_decoders_spin_briefly_and_training_sleeps_at_once() -> None:
    assert wait_policy("/any/where/translate.py") == wait_policy("serve.py") == {"GOMP_SPINCOUNT": "2000"}
    assert wait_policy("train.py") == {"OMP_WAIT_POLICY": "PASSIVE"}


@pytest.mark.parametrize(
    ("environment", "expected"),
    [({}, "GOMP_SPINCOUNT = '2000'"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "OMP_WAIT_POLICY = 'ACTIVE'")],
)
def test_translate_sets_its_policy_before_torch_loads_unless_the_user_chose(environment, expected) -> None:
    """libgomp prints the settings it read (OMP_DISPLAY_ENV)."""
    env = {
        key: value for key, value in os.environ.items() if key not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    }
    env.update(
        OMP_DISPLAY_ENV="VERBOSE",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    env.update(environment)
    done = subprocess.run(
        [sys.executable, "translate.py", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert expected in done.stderr
