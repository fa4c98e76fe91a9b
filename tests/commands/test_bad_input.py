"""Bad input as a user gives it: one line on stderr, a non-zero exit, and nothing of theirs lost.

Each case runs the command line; the ones a subprocess adds nothing to (argument checks, the
same opener behind three commands) run its ``main`` in-process, to stay fast.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from seq2seq.config import ConfigError, DataError
from seq2seq.data import inspect
from seq2seq.data.streamed.build import main as build_main
from seq2seq.export.__main__ import main as export_main
from seq2seq.formats.run_directory import RunDirectory
from seq2seq.inference import cli
from seq2seq.inference.cli import main as translate_main
from seq2seq.launch.start import start_run
from seq2seq.serving.cli import main as serve_main
from tests.helpers.compose import ROOT, tiny_run
from tests.helpers.in_process import python
from tests.helpers.tiny import CORPUS


def _command(*argv: str, **options) -> subprocess.CompletedProcess:
    """``python ARGV`` in the repository, as a user runs it."""
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120, **options
    )


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def _bad_checkpoint(kind: str, checkpoint: Path, directory: Path) -> tuple[Path, str]:
    """A checkpoint gone wrong and the reason its error gives."""
    path = directory / f"{kind}.ckpt"
    if kind == "empty":
        path.write_bytes(b"")
        return path, "the file is empty (0 bytes)"
    if kind == "truncated":  # a copy cut short
        path.write_bytes(checkpoint.read_bytes()[:100_000])
        return path, "the file is truncated (100,000 bytes, its zip archive has no end)"
    if kind == "short":  # torch's own error is an OSError, EINVAL
        path.write_bytes(checkpoint.read_bytes()[:5_000])
        return path, "the file is truncated (5,000 bytes, its zip archive has no end)"
    path.write_text("step,loss\n1,7.5\n", encoding="utf-8")  # a text file renamed .ckpt
    return path, "it holds text, not a PyTorch checkpoint"


COMMANDS: dict[str, tuple[Callable[[list[str]], int], list[str]]] = {  # prog -> (main, argv after --ckpt)
    "translate.py": (translate_main, ["Hi."]),
    "serve.py": (serve_main, []),
    "python -m seq2seq.export": (export_main, ["--force", "{tmp}/exported"]),
}
KINDS = ("empty", "truncated", "short", "text")


@pytest.mark.parametrize("prog", COMMANDS)
@pytest.mark.parametrize("kind", KINDS)
def test_an_unreadable_checkpoint_is_one_line_everywhere_it_is_opened(
    checkpoint: Path, tmp_path: Path, capsys, prog: str, kind: str
) -> None:
    path, reason = _bad_checkpoint(kind, checkpoint, tmp_path)
    main, rest = COMMANDS[prog]
    assert main(["--ckpt", str(path), *(arg.replace("{tmp}", str(tmp_path)) for arg in rest)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert _one_line(captured.err) == f"{prog}: error: cannot read checkpoint {path}: {reason}"


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
    path, reason = _bad_checkpoint(kind, checkpoint, tmp_path)
    script, *rest = (arg.replace("{tmp}", str(tmp_path)) for arg in argv)
    result = _command(*([script] if script == "-m" else [str(ROOT / script)]), *rest, "--ckpt", str(path))
    assert result.returncode == 1 and result.stdout == ""
    assert _one_line(result.stderr).endswith(f"error: cannot read checkpoint {path}: {reason}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_force_replaces_the_export_and_keeps_the_users_files(checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "model"
    assert export_main([str(out), "--ckpt", str(checkpoint)]) == 0
    (out / "NOTES.md").write_text("how I trained it\n", encoding="utf-8")
    (out / "eval").mkdir()
    (out / "eval" / "hyp.txt").write_text("hola\n", encoding="utf-8")
    argv = (
        "-m",
        "seq2seq.export",
        str(out),
        "--ckpt",
        str(checkpoint),
        "--force",
        "--quantization",
        "float32",
    )
    result = python(*argv)
    assert result.returncode == 0, result.stderr
    assert (out / "NOTES.md").read_text(encoding="utf-8") == "how I trained it\n"
    assert (out / "eval" / "hyp.txt").read_text(encoding="utf-8") == "hola\n"
    metadata = json.loads((out / "seq2seq.json").read_text(encoding="utf-8"))
    assert metadata["quantization"] == "float32"
    assert metadata["files"] == sorted({p.name for p in out.iterdir()} - {"NOTES.md", "eval"})
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no staged or old directory left


def test_an_export_that_did_not_list_its_files_keeps_what_the_new_one_does_not_write(
    checkpoint: Path, tmp_path: Path
) -> None:
    out = tmp_path / "model"
    assert export_main([str(out), "--ckpt", str(checkpoint)]) == 0
    metadata = json.loads((out / "seq2seq.json").read_text(encoding="utf-8"))
    del metadata["files"]  # as exports were written before seq2seq.json listed them
    (out / "seq2seq.json").write_text(json.dumps(metadata), encoding="utf-8")
    (out / "NOTES.md").write_text("mine\n", encoding="utf-8")
    assert export_main([str(out), "--ckpt", str(checkpoint), "--force"]) == 0
    assert (out / "NOTES.md").read_text(encoding="utf-8") == "mine\n"


def test_force_refuses_to_overwrite_a_file_of_the_users(checkpoint: Path, tmp_path: Path, capsys) -> None:
    """A ctranslate2 export has no README.md, a transformers one does: the user's stays, unreplaced."""
    data = torch.load(checkpoint, weights_only=True)
    data["seq2seq"]["data_config"]["path"] = str(tmp_path / "moved.tsv")  # the model card scores nothing
    moved = tmp_path / "moved.ckpt"
    torch.save(data, moved)
    out = tmp_path / "model"
    assert export_main([str(out), "--ckpt", str(moved)]) == 0
    (out / "README.md").write_text("my notes\n", encoding="utf-8")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert export_main([str(out), "--ckpt", str(moved), "--to", "transformers", "--force"]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after transformers' progress bar
    assert error == (
        f"python -m seq2seq.export: error: {out}/README.md was not written by the earlier export and the "
        "new one writes a file of that name: move it away first"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "moved.ckpt"]


def test_output_writes_through_a_symlink_and_keeps_the_files_mode(checkpoint: Path, tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("yesterday's\n", encoding="utf-8")
    real.chmod(0o604)
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    result = python(
        str(ROOT / "translate.py"), "--ckpt", str(checkpoint), "--device", "cpu", "-o", str(link), "Hi."
    )
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.resolve() == real
    assert len(real.read_text(encoding="utf-8").splitlines()) == 1 and "yesterday" not in real.read_text(
        encoding="utf-8"
    )
    assert stat.S_IMODE(real.stat().st_mode) == 0o604
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


def test_a_new_output_file_gets_the_umasks_mode(checkpoint: Path, tmp_path: Path, run_cli) -> None:
    umask = os.umask(0o027)
    try:
        code, _, err = run_cli(
            "--ckpt", str(checkpoint), "--device", "cpu", "-o", str(tmp_path / "out.txt"), "Hi."
        )
    finally:
        os.umask(umask)
    assert code == 0, err
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o640


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    """A few pairs of the fixture corpus, laid out as the checkpoint's training corpus."""
    path = tmp_path / "pairs.tsv"
    path.write_text(
        "".join(CORPUS.read_text(encoding="utf-8").splitlines(keepends=True)[:4]), encoding="utf-8"
    )
    return path


def test_an_unwritable_metrics_file_fails_before_decoding(
    checkpoint: Path, pairs: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "missing" / "dir" / "m.json"
    ok = tmp_path / "ok.txt"
    result = python(
        str(ROOT / "translate.py"), "--ckpt", str(checkpoint), "--device", "cpu", "--eval", str(pairs),
        "--output", str(ok), "--metrics-out", str(missing),
    )  # fmt: skip
    assert result.returncode == 1 and result.stdout == ""
    reason = f"its directory {missing.parent} does not exist"
    assert _one_line(result.stderr) == f"translate.py: error: cannot write --metrics-out {missing}: {reason}"
    assert not ok.exists()


def test_scores_are_printed_before_a_late_write_fails(
    checkpoint: Path, pairs: Path, tmp_path: Path, run_cli, monkeypatch
) -> None:
    scores_dir = tmp_path / "scores"
    scores_dir.mkdir()
    evaluate = cli.evaluate

    def evaluate_then_lose_the_directory(*args):
        evaluation = evaluate(*args)
        shutil.rmtree(scores_dir)  # gone while decoding ran
        return evaluation

    monkeypatch.setattr(cli, "evaluate", evaluate_then_lose_the_directory)
    code, lines, err = run_cli(
        "--ckpt", str(checkpoint), "--device", "cpu", "--eval", str(pairs),
        "--output", str(tmp_path / "ok.txt"), "--metrics-out", str(scores_dir / "m.json"),
    )  # fmt: skip
    assert code == 1
    assert any(line.startswith("BLEU") for line in lines) and any(line.startswith("chrF") for line in lines)
    metrics = scores_dir / "m.json"  # the user's path, not the temporary file written beside it
    assert (
        _one_line(err)
        == f"translate.py: error: cannot write --metrics-out {metrics}: No such file or directory"
    )
    assert len((tmp_path / "ok.txt").read_text(encoding="utf-8").splitlines()) == 4


def test_a_beam_wider_than_the_vocabulary_is_refused(checkpoint: Path, run_cli) -> None:
    result = _command(
        str(ROOT / "translate.py"), "--ckpt", str(checkpoint), "--device", "cpu", "--beam", "9000", "Hi."
    )
    assert result.returncode == 2 and result.stdout == ""
    assert _one_line(result.stderr) == (
        "translate.py: error: --beam 9000 is more than the target vocabulary's 300 tokens (see --help)"
    )
    code, lines, err = run_cli(
        "--ckpt", str(checkpoint), "--device", "cpu", "--beam", "300", "--max-len", "1", "Hi."
    )
    assert (code, len(lines)) == (0, 1), err  # as wide as the vocabulary: searched


@pytest.mark.parametrize("temperature", ["nan", "inf", "-1"])
def test_a_temperature_that_is_not_a_finite_number_at_least_0_is_refused(
    checkpoint: Path, run_cli, temperature: str
) -> None:
    code, lines, err = run_cli("--ckpt", str(checkpoint), "--sample", "--temperature", temperature, "Hi.")
    assert code == 2 and lines == []
    assert _one_line(err) == (
        f"translate.py: error: --temperature must be a finite number >= 0 (0: greedy), "
        f"got {float(temperature)} (see --help)"
    )


@pytest.mark.parametrize("wait", ["inf", "nan", "-1"])
def test_serve_refuses_a_batching_wait_that_is_not_a_finite_number_at_least_0(
    checkpoint: Path, capsys, wait: str
) -> None:
    """An infinite wait once killed the batcher's thread at the first request, and the request hung."""
    assert serve_main(["--ckpt", str(checkpoint), "--max-wait-ms", wait]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"serve.py: error: --max-wait-ms must be a finite number >= 0, got {float(wait)} (see --help)"
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [("seq2seq.average", "seq2seq.training.average"), ("seq2seq.data.build", "seq2seq.data.streamed.build")],
)
def test_a_moved_command_answers_at_its_old_name_with_a_notice(old: str, new: str) -> None:
    """Users' scripts call the old names: they run, and say where the command went."""
    moved, current = _command("-m", old, "--help"), _command("-m", new, "--help")
    assert moved.returncode == current.returncode == 0 and moved.stdout == current.stdout != ""
    assert _one_line(moved.stderr) == (
        f"warning: python -m {old} has moved to python -m {new}; the old name goes in a later release"
    )


def test_temperature_0_is_greedy_search(checkpoint: Path, run_cli) -> None:
    sentences = ["How are you?", "I like coffee.", "Good morning."]
    common = ["--ckpt", str(checkpoint), "--device", "cpu", "--dtype", "float32"]
    greedy = run_cli(*common, "--greedy", *sentences)
    assert run_cli(*common, "--sample", "--temperature", "0", "--seed", "3", *sentences) == greedy
    assert greedy[0] == 0


def test_a_binary_corpus_is_not_called_utf_16(tmp_path: Path, capsys) -> None:
    """The corpus as training reads it (``python -m seq2seq.data.inspect`` composes the same config)."""
    corpus = tmp_path / "corpus.tsv"
    corpus.write_bytes(bytes(range(256)) * 64)  # NUL bytes, and no text in any encoding
    overrides = ["experiment=tiny", f"data.path={corpus}", f"data.cache_dir={tmp_path / 'cache'}"]
    assert inspect.main(overrides) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"error: {corpus}: ")
    assert line.endswith(
        "first undecodable at line 1: NUL bytes, and not UTF-16 text either: is it a text file?"
    )


RESUME_KINDS = (*KINDS, "other model")


@pytest.mark.parametrize("kind", RESUME_KINDS)
def test_a_bad_resume_checkpoint_is_one_line_before_the_run_writes(
    checkpoint: Path, tmp_path: Path, kind: str
) -> None:
    if kind == "other model":  # the fixture's model is configs/model/tiny.yaml's, 32 wide
        path, overrides = checkpoint, ["model.d_model=64"]
        reason = f"{path} has model.d_model=32, this run model.d_model=64: set it as the checkpoint has it"
    else:
        path, reason = _bad_checkpoint(kind, checkpoint, tmp_path)
        overrides, reason = [], f"cannot read checkpoint {path}: {reason}"
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError) as failure:
        start_run(tiny_run(run_dir, tmp_path / "cache", f"ckpt_path={path}", *overrides))
    assert str(failure.value) == f"ckpt_path: {reason}"
    assert not run_dir.exists() and not (tmp_path / "cache").exists()


def test_train_py_refuses_a_bad_resume_checkpoint_and_leaves_its_directory_free(
    checkpoint: Path, tmp_path: Path
) -> None:
    """The corrected command must not meet the failed one's run as 'an earlier run' to resume."""
    path, reason = _bad_checkpoint("truncated", checkpoint, tmp_path)
    run_dir = tmp_path / "run"
    result = python(
        str(ROOT / "train.py"), "experiment=tiny", f"hydra.run.dir={run_dir}", f"ckpt_path={path}",
        f"data.cache_dir={tmp_path / 'cache'}",
    )  # fmt: skip
    assert result.returncode == 1
    assert _one_line(result.stderr) == f"error: ckpt_path: cannot read checkpoint {path}: {reason}"
    assert not run_dir.exists()
    RunDirectory.claim(
        run_dir, resumes=False, overwrite=False
    ).release()  # what the corrected command does first


def test_a_config_error_keeps_the_directory_the_user_made_and_their_files(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tokenizer.json").write_text('{"mine": true}', encoding="utf-8")  # a name the run writes too
    result = _command(
        str(ROOT / "train.py"), "experiment=tiny", f"hydra.run.dir={mine}", "optim.lr=-1",
        f"data.cache_dir={tmp_path / 'cache'}",
    )  # fmt: skip
    assert result.returncode == 1
    assert _one_line(result.stderr) == "error: optim.lr must be > 0, got -1.0"
    assert [path.name for path in mine.iterdir()] == ["tokenizer.json"]
    assert (mine / "tokenizer.json").read_text(encoding="utf-8") == '{"mine": true}'


def test_a_bad_optimizer_value_is_one_line_and_the_corrected_command_trains(tmp_path: Path) -> None:
    """It was a traceback that left a run directory, which then refused the corrected command."""
    run_dir = tmp_path / "run"
    command = [
        str(ROOT / "train.py"), "experiment=tiny", f"hydra.run.dir={run_dir}", "trainer.max_steps=2",
        f"data.cache_dir={tmp_path / 'cache'}",
    ]  # fmt: skip
    result = _command(*command, "optim.weight_decay=-1")
    assert result.returncode == 1
    assert _one_line(result.stderr) == "error: optim.weight_decay must be >= 0, got -1.0"
    assert not run_dir.exists()
    result = _command(*command)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (run_dir / "checkpoints" / "best.ckpt").is_file()


def test_a_max_length_that_drops_every_pair_is_one_line_before_training(tmp_path: Path) -> None:
    """It trained nothing and exited 0 without a checkpoint."""
    run_dir = tmp_path / "run"
    message = r"^data\.max_length=1 drops all \d+ training pairs, each longer: raise it, or set data\."
    with pytest.raises(DataError, match=message):
        start_run(tiny_run(run_dir, tmp_path / "cache", "data.max_length=1"))
    assert not run_dir.exists()


def test_a_failed_start_removes_only_what_it_added(tmp_path: Path) -> None:
    """As train.py fails before training: claimed, Hydra's files written, then discarded."""
    made, existing = tmp_path / "runs" / "new", tmp_path / "existing"
    existing.mkdir()
    (existing / "config.yaml").write_text("mine\n", encoding="utf-8")
    for run_dir in (made, existing):
        claimed = RunDirectory.claim(run_dir, resumes=False, overwrite=False)
        (run_dir / ".hydra").mkdir(exist_ok=True)
        (run_dir / "train.log").write_text("started\n", encoding="utf-8")
        claimed.release()
        claimed.discard_unstarted()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["existing"]  # runs/ was made for the run
    assert [path.name for path in existing.iterdir()] == ["config.yaml"]
    assert (existing / "config.yaml").read_text(encoding="utf-8") == "mine\n"


def _unwritable_cache(tmp_path: Path) -> tuple[Path, str]:
    """A data.cache_dir no one can create (a file stands where its parent should be: as root,
    permissions would not stop the write) and the line that says so."""
    (tmp_path / "file").write_text("not a folder\n", encoding="utf-8")
    cache = tmp_path / "file" / "cache"
    return cache, (
        f"error: cannot write the data cache at {cache / 'digests'}: Not a directory; "
        "set data.cache_dir to a directory you can write"
    )


def test_an_unwritable_cache_is_one_line_from_the_data_build(tmp_path: Path, capsys) -> None:
    cache, line = _unwritable_cache(tmp_path)
    assert build_main(["data=tiny", f"data.cache_dir={cache}"]) == 1
    assert _one_line(capsys.readouterr().err) == line


def test_an_unwritable_cache_is_one_line_from_train_py(tmp_path: Path) -> None:
    cache, line = _unwritable_cache(tmp_path)
    run_dir = tmp_path / "run"
    result = python(
        str(ROOT / "train.py"), "experiment=tiny", f"hydra.run.dir={run_dir}", f"data.cache_dir={cache}"
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == line  # after Lightning's "Seed set to 42"
    assert not run_dir.exists()


def test_output_refuses_a_read_only_file_even_as_root(checkpoint: Path, tmp_path: Path, run_cli) -> None:
    kept = tmp_path / "kept.txt"
    kept.write_text("do not touch\n", encoding="utf-8")
    kept.chmod(0o444)
    code, lines, err = run_cli("--ckpt", str(checkpoint), "--device", "cpu", "-o", str(kept), "Hi.")
    assert (code, lines) == (1, [])
    assert (
        _one_line(err)
        == f"translate.py: error: cannot write --output {kept}: the file is read-only (mode 444)"
    )
    assert kept.read_text(encoding="utf-8") == "do not touch\n" and stat.S_IMODE(kept.stat().st_mode) == 0o444


def test_output_writes_into_a_fifo_instead_of_replacing_it(checkpoint: Path, tmp_path: Path, run_cli) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text(encoding="utf-8")), daemon=True)
    reader.start()
    code, _, err = run_cli(
        "--ckpt", str(checkpoint), "--device", "cpu", "-o", str(fifo), "Hi.", "Good morning."
    )
    reader.join(timeout=60)
    assert code == 0, err
    assert stat.S_ISFIFO(fifo.stat().st_mode) and len(read[0].splitlines()) == 2
    assert [path.name for path in tmp_path.iterdir()] == ["fifo"]


def test_output_writes_into_a_device_instead_of_replacing_it(
    checkpoint: Path, tmp_path: Path, run_cli
) -> None:
    """A node of its own, the same device as /dev/null: replacing /dev/null itself would break the machine."""
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    code, _, err = run_cli("--ckpt", str(checkpoint), "--device", "cpu", "-o", str(null), "Hi.")
    assert code == 0, err
    assert stat.S_ISCHR(null.stat().st_mode) and null.stat().st_rdev == os.makedev(1, 3)
    assert [path.name for path in tmp_path.iterdir()] == ["null"]


def test_output_to_dev_stdout_streams_into_the_pipe(checkpoint: Path) -> None:
    result = _command(
        str(ROOT / "translate.py"), "--ckpt", str(checkpoint), "--device", "cpu", "-o", "/dev/stdout", "Hi."
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1 and "partial" not in result.stderr
