"""The figures of the pages are those of docs/records, and a finished run becomes a record."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from seq2seq.formats.checkpoint import read_checkpoint
from seq2seq.launch.start import start_run
from seq2seq.machine.hardware import cpu_class, describe
from tests.helpers.compose import ROOT, tiny_job
from tools.docs import learning_curves, results_page
from tools.docs.run_record import precision_note


def test_the_pages_show_what_the_records_give() -> None:
    assert results_page.check_all(results_page.load_records()) is None


def test_a_changed_record_is_a_difference_named_by_page_and_line(tmp_path: Path) -> None:
    records = tmp_path / "records"
    shutil.copytree(results_page.RECORDS, records)
    path = records / "zen4-small-30min.json"
    data = json.loads(path.read_text())
    data["steps"] = 2408
    path.write_text(json.dumps(data))
    difference = results_page.check(results_page.load_records(records), results_page.pages())
    assert difference is not None and difference.startswith("README.md:") and "2,408" in difference


def test_the_learning_curves_were_drawn_from_the_current_records() -> None:
    assert learning_curves.stale(results_page.load_records()) is None
    assert learning_curves.PICTURE.stat().st_size < 100_000  # small enough for the README


def test_a_changed_record_makes_the_picture_stale_until_it_is_drawn_again(tmp_path: Path) -> None:
    records = tmp_path / "records"
    shutil.copytree(results_page.RECORDS, records)
    path = records / "zen1-small-30min.json"
    data = json.loads(path.read_text())
    data["validations"][-1]["bleu"] += 1
    path.write_text(json.dumps(data))
    changed = results_page.load_records(records)
    assert "learning-curves.png" in learning_curves.stale(changed)
    picture = tmp_path / "curves.png"
    learning_curves.draw(changed, picture)
    assert learning_curves.stale(changed, picture) is None
    assert learning_curves.stale(results_page.load_records(), picture) is not None


def test_every_block_names_a_known_table_and_every_record_is_shown_or_kept_for_a_table() -> None:
    records = results_page.load_records()
    for page in results_page.pages():
        results_page.rendered(page.read_text(), records)  # an unknown table raises
    shown = "".join(page.read_text() for page in results_page.pages())
    for name, record in records.items():
        on_page = (
            record["kind"] in ("stages", "run-memory") or f" {name} -->" in shown
        )  # the requirements table
        assert record.get("tables") or on_page, f"record {name} is on no page"


def test_the_cpu_class_comes_from_the_hardware_line() -> None:
    line = "cpu AMD EPYC, flags avx2 (no avx512f avx512_bf16 amx_bf16 amx_tile), 2 cores, 2 threads, gpu none"
    assert cpu_class(line) == "AVX2 (fp32)"
    assert cpu_class(line.replace("avx2 (no avx512f avx512_bf16", "avx2 avx512f avx512_bf16 (no")) == (
        "AVX512-BF16 without AMX"
    )


def test_the_precision_note_says_auto_and_why_or_that_it_was_set() -> None:
    assert precision_note("32-true (AMD EPYC, 2 threads: no AVX512-BF16/AMX)") == (
        "auto: AMD EPYC, 2 threads: no AVX512-BF16/AMX"
    )
    assert precision_note("bf16-mixed (set explicitly)") == "set explicitly"
    assert precision_note(None) is None


@pytest.fixture(scope="module")
def tiny_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("record")
    start_run(tiny_job(tmp / "run", tmp / "cache"))
    return tmp / "run"


def test_translate_writes_its_evaluation_as_json(tiny_run_dir: Path, tmp_path: Path, run_cli) -> None:
    out = tmp_path / "test.json"
    best = str(tiny_run_dir / "checkpoints" / "best.ckpt")
    code, lines, _ = run_cli("--ckpt", best, "--eval", "test", "--beam", "2", "--metrics-out", str(out))
    assert code == 0
    metrics = json.loads(out.read_text())
    assert (metrics["eval"], metrics["beam"], metrics["sampling"]) == ("test", 2, False)
    assert metrics["compute"] in lines[-1] and metrics["sentences"] > 0 and metrics["seconds"] >= 0
    assert lines[0].startswith(f"BLEU = {metrics['bleu']:.2f} ")


def test_metrics_out_needs_eval(trained_ckpt: Path, tmp_path: Path, run_cli) -> None:
    code, _, err = run_cli("--ckpt", str(trained_ckpt), "--metrics-out", str(tmp_path / "m.json"), "Hi")
    assert code == 2 and "--metrics-out needs --eval" in err and not (tmp_path / "m.json").exists()


def test_a_finished_run_becomes_a_record_and_a_row(tiny_run_dir: Path, tmp_path: Path, run_cli) -> None:
    metrics = tmp_path / "test.json"
    best = tiny_run_dir / "checkpoints" / "best.ckpt"
    assert run_cli("--ckpt", str(best), "--eval", "test", "--metrics-out", str(metrics))[0] == 0
    records = tmp_path / "records"
    records.mkdir()
    argv = ["--records", str(records), "record", str(tiny_run_dir), "--name", "tiny-run"]
    assert results_page.main([*argv, "--test-metrics", str(metrics), "--table", "results"]) == 0
    record = json.loads((records / "tiny-run.json").read_text())
    assert record["steps"] == read_checkpoint(tiny_run_dir / "checkpoints" / "last.ckpt")["global_step"] > 0
    assert record["val_bleu"] == round(read_checkpoint(best)["seq2seq"]["best_bleu"], 2)
    assert record["tokens_per_s"] > 0 and record["validations"]
    assert record["machine"]["hardware_line"] == describe() and record["precision"] == "32-true"
    assert record["precision_note"] == "set explicitly"  # the tiny experiment pins its precision
    assert record["test"][0]["bleu"] == json.loads(metrics.read_text())["bleu"]
    row = results_page.results_table(results_page.load_records(records), "results")
    assert f"| `tiny-run` | {record['machine']['cpu']}; " in row and f"| {record['steps']} |" in row


SIGNED = re.compile(r"(?<![\w.])[+-]\d+\.\d\d\b")  # a difference: +0.43, -1.60


def test_a_signed_difference_in_the_results_prose_is_one_a_table_renders() -> None:
    """The prose of results.md states no difference (+0.43, -1.60) that its rendered tables do not
    show, so the prose cannot drift from the records."""
    text = (ROOT / "docs" / "results.md").read_text()
    blocks = "".join(re.findall(r"<!-- records:.*?<!-- /records -->", text, re.S))
    prose = re.sub(r"<!-- records:.*?<!-- /records -->", "", text, flags=re.S)
    assert [figure for figure in SIGNED.findall(prose) if figure not in blocks] == []


def test_a_signed_difference_is_found() -> None:
    assert SIGNED.findall("gains +0.43, loses -1.60 (at 0.5x, step 2-3)") == ["+0.43", "-1.60"]
