"""``translate.py``'s bad arguments and output files: one line on stderr, a non-zero exit, and
nothing of the user's lost (read-only files, symlinks, FIFOs and devices written as such)."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path

import pytest

from seq2seq.inference import cli
from tests.helpers.bad_input import one_line, run_as_user
from tests.helpers.compose import ROOT
from tests.helpers.in_process import python
from tests.helpers.tiny import CORPUS


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
    assert one_line(result.stderr) == f"translate.py: error: cannot write --metrics-out {missing}: {reason}"
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
        one_line(err)
        == f"translate.py: error: cannot write --metrics-out {metrics}: No such file or directory"
    )
    assert len((tmp_path / "ok.txt").read_text(encoding="utf-8").splitlines()) == 4


def test_a_beam_wider_than_the_vocabulary_is_refused(checkpoint: Path, run_cli) -> None:
    result = python(
        str(ROOT / "translate.py"), "--ckpt", str(checkpoint), "--device", "cpu", "--beam", "9000", "Hi."
    )
    assert result.returncode == 2 and result.stdout == ""
    assert one_line(result.stderr) == (
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
    assert one_line(err) == (
        f"translate.py: error: --temperature must be a finite number >= 0 (0: greedy), "
        f"got {float(temperature)} (see --help)"
    )


def test_temperature_0_is_greedy_search(checkpoint: Path, run_cli) -> None:
    sentences = ["How are you?", "I like coffee.", "Good morning."]
    common = ["--ckpt", str(checkpoint), "--device", "cpu", "--dtype", "float32"]
    greedy = run_cli(*common, "--greedy", *sentences)
    assert run_cli(*common, "--sample", "--temperature", "0", "--seed", "3", *sentences) == greedy
    assert greedy[0] == 0


def test_output_refuses_a_read_only_file_even_as_root(checkpoint: Path, tmp_path: Path, run_cli) -> None:
    kept = tmp_path / "kept.txt"
    kept.write_text("do not touch\n", encoding="utf-8")
    kept.chmod(0o444)
    code, lines, err = run_cli("--ckpt", str(checkpoint), "--device", "cpu", "-o", str(kept), "Hi.")
    assert (code, lines) == (1, [])
    assert (
        one_line(err)
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
    result = run_as_user(
        str(ROOT / "translate.py"), "--ckpt", str(checkpoint), "--device", "cpu", "-o", "/dev/stdout", "Hi."
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1 and "partial" not in result.stderr
