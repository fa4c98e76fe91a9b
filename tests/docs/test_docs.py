"""The documentation's commands work as written.

Every shell command in README.md and docs/*.md, in a fenced block or an inline code span. A
``train.py`` command (also after ``torchrun ...`` or ``srun``), and an override shown on its own
(`` `optim.lr=1e-3` ``), has its config composed as ``train.py`` composes it, the hardware's recipe
included, every job of a sweep; a training run must also pass the rules of ``seq2seq/config/``,
unless its paragraph shows the error it gets (`` `error: ...` ``), which must then be that error.
A ``translate.py``, ``serve.py``, ``python -m seq2seq.export`` or ``python -m seq2seq.training.average``
command in a fenced block is parsed by that command's own parser; one in prose, often a fragment
(``translate.py --eval``), may use only the flags its parser has. A ``python -m bench.<family>.<name>``
or ``python -m tools.docs.<name>`` command, fenced or in prose, must parse with its script's parser
(built in ``main``; the script stops once its arguments are parsed), so a missing required argument
fails. The fenced ``translate.py``, shortlist, export, averaging and ``bench.decode.dtypes`` lines of
each page then run, in the page's order, on the tiny trained checkpoint standing in for every
checkpoint the page names: a line that needs something the page never makes fails. Placeholders
such as ``<run>``, ``N`` or ``$SLURM_NNODES`` stand for any value; ``[overrides]`` and ``...`` for
nothing.
"""

from __future__ import annotations

import argparse
import io
import re
import shlex
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
from hydra.errors import HydraException

from seq2seq.command_line import UsageError
from seq2seq.config import ConfigError, RunConfig, validated_run
from seq2seq.export.__main__ import build_parser as export_parser
from seq2seq.inference.cli import build_parser as translate_parser
from seq2seq.inference.shortlist import build_parser as shortlist_parser
from seq2seq.launch.command_line import hydra_args, job_overrides
from seq2seq.launch.composing import compose_run, explain
from seq2seq.launch.recipe import choose_recipe
from seq2seq.serving.cli import build_parser as serve_parser
from seq2seq.training.average import build_parser as average_parser
from tests.helpers.compose import CONFIGS, ROOT
from tests.helpers.doc_lines import INLINE, shell_lines
from tests.helpers.in_process import python

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"<[^<>\s][^<>]*>|\$\{?\w+\}?|…")  # <run>, <machine 0>, $SLURM_NNODES
CONFIG_HEADS = {*(f.name for f in fields(RunConfig)), "experiment", "hparams_search", "hydra"}
ENTRY_POINTS = ("train.py", "translate.py", "serve.py")
OVERRIDE = re.compile(r"\+{0,2}(\w+)(\.\w+)*=\S+")
SCRIPT = re.compile(r"-m (bench|tools\.docs)(\.\w+)+")  # its flags are those its --help lists
PARSERS: dict[str, Callable] = {
    "translate.py": translate_parser,
    "serve.py": serve_parser,
    "-m seq2seq.export": export_parser,
    "-m seq2seq.training.average": average_parser,
    "-m seq2seq.inference.shortlist": shortlist_parser,
}


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    program: str  # "train.py", "translate.py", "serve.py", "-m seq2seq.<command>" or a SCRIPT
    args: tuple[str, ...]
    fenced: bool  # a whole command in a shell block, not a fragment in prose
    shown_errors: tuple[str, ...]  # the `error: ...` lines the command's paragraph shows

    def flags(self) -> set[str]:
        return {arg.strip("[]").split("=", 1)[0] for arg in self.args if arg.strip("[]").startswith("-")}

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.program} {' '.join(self.args)}"


def segments(line: str) -> Iterator[list[str]]:
    """The simple commands of a shell line, split at ``&&``, ``|`` and ``;``, without redirections."""
    line = re.sub(r"\s\d*>&\d+", " ", line)  # descriptor copies (2>&1) name no file
    lexer = shlex.shlex(PLACEHOLDER.sub("x", line), posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, "#"
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: prose, not a command
        return
    words: list[str] = []
    redirect = False
    for token in [*tokens, ";"]:
        if token in ("&&", "||", "|", ";", "&"):
            yield words
            words = []
        elif token in (">", ">>", "<", "2>", "&>"):
            redirect = True
        elif redirect:
            redirect = False
        elif token not in ("...", "[overrides]"):
            words.append(token)


def is_override(word: str) -> bool:
    """Whether ``word`` is a ``key=value`` override of the training config."""
    return bool(OVERRIDE.fullmatch(word)) and word.lstrip("+").split(".")[0] in CONFIG_HEADS


def command(words: list[str], fenced: bool) -> tuple[str, list[str]] | None:
    """(program, its arguments) of a command this test knows, or None."""
    if not fenced and words and all(is_override(word) for word in words):
        return "train.py", words  # overrides shown on their own
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # OMP_WAIT_POLICY=ACTIVE python ...
        words = words[1:]
    if words[:1] == ["srun"]:
        words = words[1:]
    if words[:1] == ["torchrun"]:
        words = words[next((i for i, w in enumerate(words) if w.endswith("train.py")), len(words)) :]
    elif words[:1] in (["python"], ["python3"]):
        words = words[1:]
    if words[:2] == ["-m", "seq2seq.data.streamed.build"]:  # composes its overrides as train.py does
        return "train.py", words[2:]
    if words[:1] == ["-m"] and " ".join(words[:2]) in PARSERS:  # python -m seq2seq.export, .average
        return " ".join(words[:2]), words[2:]
    if words[:1] == ["-m"] and SCRIPT.fullmatch(" ".join(words[:2])):  # bench.<family>.<name>, tools.docs
        return " ".join(words[:2]), words[2:]
    if words and words[0] in ENTRY_POINTS:
        return words[0], words[1:]
    return None


def documented_commands() -> list[Command]:
    """Each distinct command of the pages, where it first appears."""
    found: dict[tuple, Command] = {}
    for page in PAGES:
        for number, line, fenced, paragraph in shell_lines(page.read_text()):
            spans = INLINE.findall(paragraph)
            shown = tuple(span.rstrip(" …") for span in spans if span.startswith("error: "))
            for words in segments(line):
                if known := command(words, fenced):
                    key = (known[0], tuple(known[1]), fenced)
                    found.setdefault(key, Command(page.name, number, *key, shown))
    return list(found.values())


def flags(help_text: str) -> set[str]:
    """The options a parser's help lists."""
    return set(re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", help_text))


COMMANDS = documented_commands()


def test_the_pages_show_every_kind_of_command() -> None:
    """The parsing above finds what it is for (so a change of format cannot leave nothing to check)."""
    programs = {c.program for c in COMMANDS}
    assert {
        "train.py",
        "translate.py",
        "serve.py",
        "-m seq2seq.export",
        "-m seq2seq.training.average",
    } <= programs
    assert any(p.startswith("-m bench.") for p in programs)
    assert any(p.startswith("-m tools.docs.") for p in programs)
    train = [c.args for c in COMMANDS if c.program == "train.py"]
    assert ("trainer=ddp", "trainer.devices=N") in train  # a torchrun line, N kept as a value
    assert ("model.n_heads=3",) in train  # an override in prose


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.program == "train.py"], ids=str)
def test_a_documented_training_command_composes_as_train_py_would(cmd: Command) -> None:
    args = hydra_args(list(cmd.args))
    for overrides in job_overrides(choose_recipe(args.overrides, None, CONFIGS)[0], args.multirun):
        try:
            cfg = compose_run(CONFIGS, overrides)
            if args.cfg is None and args.info is None and not args.help:
                validated_run(cfg)
        except (ConfigError, HydraException) as err:  # fine only where the page shows this error
            line = str(err) if isinstance(err, ConfigError) else explain(err, CONFIGS, overrides)
            if line is None or not f"error: {line}".startswith(cmd.shown_errors or ("\0",)):
                raise


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.program in PARSERS and c.fenced], ids=str)
def test_a_documented_command_parses_with_its_own_parser(cmd: Command) -> None:
    try:
        PARSERS[cmd.program]().parse_args(list(cmd.args))
    except UsageError as err:  # these parsers raise it where argparse would exit
        pytest.fail(f"{cmd}: {err}")


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.program in PARSERS and not c.fenced], ids=str)
def test_a_command_mentioned_in_prose_uses_only_its_flags(cmd: Command) -> None:
    known = flags(PARSERS[cmd.program]().format_help())
    assert cmd.flags() <= known, f"{cmd}: no such flag {sorted(cmd.flags() - known)}"


class Parsed(SystemExit):
    """Raised where a script's parser returns: its arguments parse, and the script does nothing."""


def parsed_only(program: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """(exit status, stderr) of ``python PROGRAM ARGS`` stopped where its arguments are parsed."""
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, *a, **kw) -> argparse.Namespace:
        parse(self, *a, **kw)
        raise Parsed(0)

    with monkeypatch.context() as patched:
        patched.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        result = python(*program.split(), *args)
    return result.returncode, result.stderr


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if SCRIPT.fullmatch(c.program)], ids=str)
def test_a_documented_script_command_parses(cmd: Command, monkeypatch: pytest.MonkeyPatch) -> None:
    args = [arg.strip("[]") for arg in cmd.args if arg.strip("[]") not in ("", "...")]
    code, stderr = parsed_only(cmd.program, args, monkeypatch)
    assert code == 0, f"{cmd}: {stderr.strip().splitlines()[-1:]}"


RUN = ("translate.py", "-m seq2seq.inference.shortlist", "-m seq2seq.export", "-m seq2seq.training.average",
       "-m bench.decode.dtypes")  # fmt: skip
CHECKPOINTS = ("best.ckpt", "last.ckpt", "runs/x/checkpoints/best.ckpt", "runs/x/checkpoints/last.ckpt",
               "runs/x/checkpoints/step-100.ckpt", "runs/x/checkpoints/step-200.ckpt",
               "runs/es-en/checkpoints/best.ckpt", "runs/es-en-dev/checkpoints/best.ckpt")  # fmt: skip


def runnable(page: Path) -> list[tuple[int, str, list[str]]]:
    """(line, program, arguments) of the page's fenced commands that :data:`RUN` holds, in order."""
    found = []
    for number, line, fenced, _ in shell_lines(page.read_text()):
        for words in segments(line) if fenced else ():
            if (known := command(words, fenced)) and known[0] in RUN:
                found.append((number, *known))
    return found


RUNNABLE = {page.name: runnable(page) for page in PAGES if runnable(page)}


def test_the_pages_run_what_they_show() -> None:
    shown = {program for commands in RUNNABLE.values() for _, program, _ in commands}
    assert shown == set(RUN) and {"README.md", "translating.md", "performance.md"} <= set(RUNNABLE)


def expanded(args: list[str], directory: Path) -> list[str]:
    """``args`` with each glob (``step-*.ckpt``) expanded in ``directory``, as a shell would."""
    names = []
    for arg in args:
        matches = sorted(directory.glob(arg)) if "*" in arg else []
        names += [str(path.relative_to(directory)) for path in matches] or [arg]
    return names


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(RUNNABLE))
def test_a_page_s_decoding_commands_run_in_order(
    page: str, trained_ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each command exits 0 in a directory holding the tiny checkpoint under every name the pages
    use, a few input files, and what the page's earlier commands wrote (a shortlist, an export)."""
    for name in CHECKPOINTS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(trained_ckpt, tmp_path / name)
    pairs = (ROOT / "tests" / "fixtures" / "tiny.tsv").read_text(encoding="utf-8").splitlines()[:5]
    (tmp_path / "my_pairs.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    (tmp_path / "mine.en").write_text("".join(p.split("\t")[0] + "\n" for p in pairs), encoding="utf-8")
    monkeypatch.syspath_prepend(str(ROOT))  # bench/, as from the repository root
    for number, program, args in RUNNABLE[page]:
        monkeypatch.setattr("sys.stdin", io.StringIO("How are you?\n"))  # cat file.en | translate.py
        argv = [str(ROOT / program)] if program in ENTRY_POINTS else program.split()
        result = python(*argv, *expanded(args, tmp_path), cwd=tmp_path)
        assert result.returncode == 0, f"{page}:{number}: {program} {' '.join(args)}\n{result.stderr[-2000:]}"
