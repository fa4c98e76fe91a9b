"""How every command line ends (seq2seq/command_line.py): the exit code and at most one line on stderr."""

from __future__ import annotations

import pytest

from seq2seq.command_line import UsageError, run_command
from seq2seq.config import DataError
from seq2seq.data.inspect import main as inspect_main
from seq2seq.data.streamed.build import main as build_main


def _raise(error: BaseException):
    def command() -> int:
        raise error

    return command


def test_a_command_that_succeeds_gives_its_own_code(capsys) -> None:
    assert run_command("prog", lambda: 0, (DataError,)) == 0
    assert capsys.readouterr().err == ""


def test_bad_arguments_exit_2_with_one_line_that_points_to_help(capsys) -> None:
    assert run_command("prog", _raise(UsageError("--beam must be positive, got 0")), ()) == 2
    assert capsys.readouterr().err == "prog: error: --beam must be positive, got 0 (see --help)\n"


def test_an_expected_error_exits_1_with_the_first_line_of_its_message(capsys) -> None:
    assert run_command("prog", _raise(DataError("no such file\nmore detail")), (DataError,)) == 1
    assert capsys.readouterr().err == "prog: error: no such file\n"
    assert run_command("prog", _raise(DataError()), (DataError,)) == 1
    assert capsys.readouterr().err == "prog: error: DataError\n"


def test_an_unexpected_error_is_a_bug_and_keeps_its_traceback() -> None:
    with pytest.raises(KeyError):
        run_command("prog", _raise(KeyError("bug")), (DataError,))


def test_ctrl_c_exits_130_and_a_reader_that_left_exits_1_quietly(capsys) -> None:
    assert run_command("prog", _raise(KeyboardInterrupt()), ()) == 130
    assert run_command("prog", _raise(BrokenPipeError()), (OSError,)) == 1  # before OSError's line
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", [inspect_main, build_main])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_the_override_commands_print_their_usage_for_help(command, flag: str, capsys) -> None:
    """Hydra would take ``--help`` for a malformed override; these commands print what they do."""
    assert command([flag]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"``python -m {command.__module__} [overrides]``")
