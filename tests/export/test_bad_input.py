"""``python -m seq2seq.export --force`` over an earlier export: nothing of the user's is lost."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from seq2seq.export.__main__ import main as export_main
from tests.helpers.in_process import python


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
