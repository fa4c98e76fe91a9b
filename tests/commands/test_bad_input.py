"""Bad input as a user gives it, the same for every command: one line on stderr, a non-zero exit.

The opener behind three commands runs their ``main`` in-process, to stay fast; each command's own
line is checked once as a subprocess."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from seq2seq.export.__main__ import main as export_main
from seq2seq.inference.cli import main as translate_main
from seq2seq.serving.cli import main as serve_main
from tests.helpers.bad_input import KINDS, bad_checkpoint, one_line, run_as_user
from tests.helpers.compose import ROOT
from tests.helpers.in_process import python

COMMANDS: dict[str, tuple[Callable[[list[str]], int], list[str]]] = {  # prog -> (main, argv after --ckpt)
    "translate.py": (translate_main, ["Hi."]),
    "serve.py": (serve_main, []),
    "python -m seq2seq.export": (export_main, ["--force", "{tmp}/exported"]),
}


@pytest.mark.parametrize("prog", COMMANDS)
@pytest.mark.parametrize("kind", KINDS)
def test_an_unreadable_checkpoint_is_one_line_everywhere_it_is_opened(
    checkpoint: Path, tmp_path: Path, capsys, prog: str, kind: str
) -> None:
    path, reason = bad_checkpoint(kind, checkpoint, tmp_path)
    main, rest = COMMANDS[prog]
    assert main(["--ckpt", str(path), *(arg.replace("{tmp}", str(tmp_path)) for arg in rest)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert one_line(captured.err) == f"{prog}: error: cannot read checkpoint {path}: {reason}"


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["translate.py", "Hi."], "empty"),
        (["serve.py"], "truncated"),
        (["-m", "seq2seq.export", "{tmp}/exported"], "text"),
    ],
)
def test_the_commands_themselves_print_that_line(
    checkpoint: Path, tmp_path: Path, argv: list[str], kind: str
) -> None:
    path, reason = bad_checkpoint(kind, checkpoint, tmp_path)
    script, *rest = (arg.replace("{tmp}", str(tmp_path)) for arg in argv)
    result = run_as_user(*([script] if script == "-m" else [str(ROOT / script)]), *rest, "--ckpt", str(path))
    assert result.returncode == 1 and result.stdout == ""
    assert one_line(result.stderr).endswith(f"error: cannot read checkpoint {path}: {reason}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


@pytest.mark.parametrize(
    ("old", "new"),
    [("seq2seq.average", "seq2seq.training.average"), ("seq2seq.data.build", "seq2seq.data.streamed.build")],
)
def test_a_moved_command_answers_at_its_old_name_with_a_notice(old: str, new: str) -> None:
    """Users' scripts call the old names: they run, and say where the command went."""
    moved, current = python("-m", old, "--help"), python("-m", new, "--help")
    assert moved.returncode == current.returncode == 0 and moved.stdout == current.stdout != ""
    assert one_line(moved.stderr) == (
        f"warning: python -m {old} has moved to python -m {new}; the old name goes in a later release"
    )
