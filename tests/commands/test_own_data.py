"""A user's own corpus end to end: training on two aligned text files, and a Latin-1 TSV taken from
the bundled corpus that ``train.py`` refuses in one line (naming the fix) and reads with it."""

from __future__ import annotations

import gzip
from pathlib import Path

from seq2seq.config import DataConfig
from seq2seq.data.corpus import CorpusPlan, load_corpus
from seq2seq.formats.checkpoint import load_model
from seq2seq.launch.start import start_run
from tests.helpers.compose import ROOT, tiny_job
from tests.helpers.in_process import python
from tests.helpers.tiny import CORPUS


def test_training_on_two_aligned_text_files(tmp_path: Path) -> None:
    pairs = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    en, es = tmp_path / "train.en", tmp_path / "train.es"
    en.write_text("".join(src + "\n" for src, _ in pairs), encoding="utf-8")
    es.write_text("".join(tgt + "\n" for _, tgt in pairs), encoding="utf-8")
    run = tmp_path / "run"
    start_run(tiny_job(run, tmp_path / "cache", f"data.path=[{en},{es}]", "trainer.max_epochs=1"))
    loaded = load_model(run / "checkpoints" / "last.ckpt")
    assert loaded.data_config.path == [str(en), str(es)]  # what translate.py --eval rebuilds the split from


def _latin1_tsv(tmp_path: Path) -> tuple[Path, list[str]]:
    lines = gzip.decompress((ROOT / "data" / "spa-eng" / "spa.txt.gz").read_bytes()).decode().splitlines()
    lines = lines[:1500]
    path = tmp_path / "latin1.tsv"
    path.write_bytes("".join(line + "\n" for line in lines).encode("latin-1"))
    return path, lines


def test_a_latin1_tsv_stops_train_py_in_one_line_and_reads_with_its_encoding(tmp_path: Path) -> None:
    path, lines = _latin1_tsv(tmp_path)
    run_dir = tmp_path / "run"
    result = python(
        "train.py",
        "experiment=tiny",
        f"data.path={path}",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={run_dir}",
    )
    accented = [number for number, line in enumerate(lines, 1) if not line.isascii()]
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {path}: {len(accented):,} of 1,500 lines are malformed ({len(accented):,} undecodable), "
        f"over data.max_malformed_share=0.01; first undecodable at line {accented[0]}: "
        "looks like Latin-1: set data.encoding=latin-1"
    )
    assert not run_dir.exists()
    cfg = DataConfig(path=str(path), encoding="latin-1", cache_dir=str(tmp_path / "cache"))
    pairs, stats = load_corpus(CorpusPlan.of(cfg))
    assert stats["malformed_lines"] == 0
    assert ["\t".join(pair) for pair in zip(pairs["src"][:], pairs["tgt"][:], strict=True)] == lines
