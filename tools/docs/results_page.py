"""The figures of README.md and docs/*.md, rendered from the records in ``docs/records/`` (one JSON
per run or measurement), so that each figure has one owner: the record the run wrote.

A page holds a rendered table between ``<!-- records: TABLE -->`` and ``<!-- /records -->``; this
tool rewrites every such block and redraws the learning curves (``learning_curves.py``) when their
records changed; ``--check`` says where a page or the picture and the records differ (exit 1), and
``record`` turns a finished run directory into a record (``run_record.py``).

    python -m tools.docs.results_page                 # rewrite the blocks
    python -m tools.docs.results_page --check         # exit 1 with the first difference
    python -m tools.docs.results_page record runs/<run> --name NAME --test-metrics test.json \
        [--machine "AMD EPYC (Zen 1)"] [--table results]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.docs import learning_curves

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "records"
BLOCK = re.compile(r"(<!-- records: ([\w-]+)(?: ([\w.-]+))? -->\n)(.*?)(<!-- /records -->)", re.S)
NOT_MEASURED = "not measured"


def load_records(directory: Path = RECORDS) -> dict[str, dict[str, Any]]:
    """Every record by name; a name used twice is an error."""
    records: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text())
        if data["name"] in records:
            raise ValueError(f"{path}: record name {data['name']!r} is used twice")
        records[data["name"]] = data
    return records


def number(value: float | int | None, missing: str = NOT_MEASURED) -> str:
    if value is None:
        return missing
    return f"{value:,}"


def dtype(compute: str | None) -> str:
    """ "PyTorch bfloat16 autocast" -> "bfloat16"; unknown -> "dtype not recorded"."""
    return compute.removeprefix("PyTorch ").removesuffix(" autocast") if compute else "dtype not recorded"


def tests(record: dict[str, Any], beam: int) -> list[dict[str, Any]]:
    return [t for t in record.get("test", []) if t["beam"] == beam]


def test_cell(record: dict[str, Any], beam: int, missing: str) -> str:
    found = tests(record, beam)
    return "; ".join(f"{number(t['bleu'])} ({dtype(t['compute'])})" for t in found) or missing


def tokens_cell(record: dict[str, Any], missing: str) -> str:
    value = number(record["tokens_per_s"], missing)
    stat = record.get("tokens_per_s_stat")
    if record.get("parallel", 1) > 1:
        return f"{value} ({record['parallel']} at once)"
    return {"median": f"{value} (median)", "about": f"about {value}"}.get(stat or "", value)


def rows_of(records: dict[str, dict[str, Any]], table: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(record, its place in ``table``) for the records that name the table, in row order."""
    placed = [(r, r["tables"][table]) for r in records.values() if table in r.get("tables", {})]
    return sorted(placed, key=lambda pair: pair[1]["row"])


def markdown(header: list[str], rows: list[list[str]], right: int = 0) -> str:
    """A Markdown table; columns from ``right`` on are right-aligned (0: none)."""
    align = ["---" if i < right or not right else "---:" for i in range(len(header))]
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines) + "\n"


def machine(record: dict[str, Any]) -> str:
    m = record["machine"]
    return "; ".join(part for part in (m.get("cpu"), m.get("class")) if part)


def results_table(records: dict[str, dict[str, Any]], _: str | None) -> str:
    header = ["run", "machine", "model", "precision", "steps", "minutes", "tokens/s",
              "val BLEU (greedy)", "test BLEU (beam 5)"]  # fmt: skip
    rows = []
    for record, _ in rows_of(records, "results"):
        missing = record.get("missing", NOT_MEASURED)
        precision = record["precision"] or missing
        if record.get("precision_note"):
            precision += f" ({record['precision_note']})"
        rows.append([
            f"`{record['name']}`", machine(record), record["model"], precision,
            number(record["steps"], missing), number(record["minutes"], missing),
            tokens_cell(record, missing), number(record["val_bleu"], missing),
            test_cell(record, 5, missing),
        ])  # fmt: skip
    return markdown(header, rows)


def front_table(records: dict[str, dict[str, Any]], _: str | None) -> str:
    header = ["machine (2 cores unless a GPU)", "default run", "steps", "val BLEU (greedy)",
              "test BLEU (beam 5)"]  # fmt: skip
    rows = [
        [machine(r), place.get("label", r["model"]), number(r["steps"]), number(r["val_bleu"]),
         test_cell(r, 5, NOT_MEASURED)]
        for r, place in rows_of(records, "readme")
    ]  # fmt: skip
    return markdown(header, rows)


def history_table(records: dict[str, dict[str, Any]], _: str | None) -> str:
    header = ["change", "machine", "steps in 30 min", "val BLEU", "test BLEU (beam 5)"]
    rows = []
    for record, place in rows_of(records, "history"):
        missing = record.get("missing", NOT_MEASURED)
        rows.append([place["label"], machine(record), number(record["steps"], missing),
                     number(record["val_bleu"], missing), test_cell(record, 5, missing)])  # fmt: skip
    return markdown(header, rows)


def levers_table(records: dict[str, dict[str, Any]], table: str) -> str:
    header = ["lever", "budget", "seed", "steps", "tokens/s", "val BLEU (greedy)", "test BLEU beam 5",
              "beam 5 s", "test BLEU greedy", "greedy s"]  # fmt: skip
    rows = []
    for record, place in rows_of(records, table):
        beam5, greedy = (tests(record, beam)[-1] if tests(record, beam) else {} for beam in (5, 1))
        label = place.get("label", record["lever"])
        rows.append([
            f"**{label}**" if place.get("bold") else label, record["budget"], str(record["seed"]),
            number(record["steps"]), tokens_cell(record, "—"), number(record["val_bleu"]),
            number(beam5.get("bleu"), "—"), number(beam5.get("seconds"), "—"),
            number(greedy.get("bleu"), "—"), number(greedy.get("seconds"), "—"),
        ])  # fmt: skip
    return markdown(header, rows)


def measurements_table(records: dict[str, dict[str, Any]], table: str) -> str:
    """One line per measurement: what it measured, and its record (a link to the JSON, whose notes
    say how and on which machine)."""
    rows = rows_of(records, table)
    return "".join(f"- {place['label']}: [`{r['name']}`](records/{r['name']}.json)\n" for r, place in rows)


def curve_table(records: dict[str, dict[str, Any]], name: str) -> str:
    """The validations of one run, a column each."""
    points = records[name]["validations"]
    rows = [["step", *(number(p["step"]) for p in points)]]
    if any(p.get("minutes") is not None for p in points):
        rows.append(["minutes", *(number(p.get("minutes"), "—") for p in points)])
    rows.append(["val BLEU (greedy)", *(number(p["bleu"]) for p in points)])
    if any(p.get("chrf") is not None for p in points):
        rows.append(["val chrF", *(number(p.get("chrf"), "—") for p in points)])
    return markdown(rows[0], rows[1:])


def table_record(records: dict[str, dict[str, Any]], name: str) -> str:
    """A measurement kept as a table (kind "table"): its header and rows as written."""
    record = records[name]
    return markdown(record["header"], [[str(cell) for cell in row] for row in record["rows"]])


def spread(scores: list[float]) -> str:
    return f"{max(scores) - min(scores):.2f}"


def lever_deltas(records: dict[str, dict[str, Any]], table: str) -> str:
    """Each lever's test BLEU (beam 5) and val BLEU minus the default's of the same seed and budget;
    then, for each budget the default ran on two seeds or more, how far its seeds lie apart."""
    rows_in = rows_of(records, table)
    defaults = {
        (r["seed"], r["budget"]): r
        for r, place in rows_in
        if place.get("label", r["lever"]).startswith("default")
    }
    rows = []
    for record, place in rows_in:
        default = defaults.get((record["seed"], record["budget"]))
        if default is None or default is record:
            continue
        test = tests(record, 5)[-1]["bleu"] - tests(default, 5)[-1]["bleu"]
        rows.append([place.get("label", record["lever"]), str(record["seed"]), f"{test:+.2f}",
                     f"{record['val_bleu'] - default['val_bleu']:+.2f}"])  # fmt: skip
    for budget in dict.fromkeys(budget for _, budget in defaults):
        runs = [defaults[key] for key in sorted(defaults) if key[1] == budget]
        if len(runs) > 1:
            seeds = " vs ".join(str(r["seed"]) for r in runs)
            test, val = spread([tests(r, 5)[-1]["bleu"] for r in runs]), spread([r["val_bleu"] for r in runs])
            rows.append([f"(the default's seed spread, {budget})", seeds, test, val])
    return markdown(["lever", "seed", "test BLEU (beam 5) - default's", "val BLEU - default's"], rows)


def stage_records(records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records.values() if r["kind"] == "stages"]


def stages_table(records: dict[str, dict[str, Any]], _: str | None) -> str:
    parts = []
    for r in stage_records(records):
        rows = [
            [s["stage"] + (f" ({s['note']})" if s.get("note") else ""),
             f"`{s['command']}`" if s.get("command") else "—", number(s["seconds"]),
             number(s.get("peak_rss_gib"))]
            for s in r["stages"]
        ]  # fmt: skip
        parts.append(f"On {r['machine']['cpu']}, {r['load']} (record `{r['name']}`):\n\n"
                     + markdown(["stage", "command", "seconds", "peak RSS (GiB)"], rows))  # fmt: skip
    return "\n".join(parts)


def requirements_table(records: dict[str, dict[str, Any]], _: str | None) -> str:
    python = re.search(r'requires-python = "([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    rows = [["Python", f"`{python}` (pyproject.toml)"]]
    gpu = NOT_MEASURED
    for r in stage_records(records):
        peak = max((s["peak_rss_gib"] for s in r["stages"] if s.get("peak_rss_gib")), default=None)
        if peak is not None:
            largest = f"{number(peak)} GiB peak RSS of the largest stage on {r['machine']['cpu']}"
            rows.append(["memory (RAM)", largest])
        rows += [[f"disk: {d['what']}", d["size"]] for d in r["disk"]]
        if r.get("gpu_memory_gib") is not None:
            gpu = f"{number(r['gpu_memory_gib'])} GiB on {r['machine']['cpu']} ({r['gpu_memory_note']})"
    rows.append(["GPU memory, `experiment=spa_en_gpu`", gpu])
    # a record with "peer_of" is the comparison run beside another (another allocator), not the default's
    for r in (r for r in records.values() if r["kind"] == "run-memory" and not r.get("peer_of")):
        what = f"memory (RAM): the {r['minutes']}-minute default in {r['precision']}"
        rows.append([what, run_memory(r)])
    return markdown(["what", "needs"], rows)


def run_memory(record: dict[str, Any]) -> str:
    """A ``run-memory`` record as the README's requirements row: every process of the run."""
    return (
        f"{number(record['trainer_peak_rss_gib'])} GiB peak RSS of the trainer, "
        f"{number(record['run_peak_pss_gib'])} GiB peak PSS of the whole run (trainer and loader worker), "
        f"under {record['allocator']}, on {record['machine']['cpu']} ({record['steps']:,} steps)"
    )


TABLES: dict[str, Callable[[dict[str, dict[str, Any]], Any], str]] = {
    "results": results_table,
    "readme": front_table,
    "history": history_table,
    "levers-round1": levers_table,
    "levers-round2": levers_table,
    "levers-round3": levers_table,
    "levers-round4": levers_table,
    "ceiling": levers_table,
    "curve": curve_table,
    "measurements": measurements_table,
    "table": table_record,
    "deltas": lever_deltas,
    "stages": stages_table,
    "requirements": requirements_table,
}


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def rendered(text: str, records: dict[str, dict[str, Any]]) -> str:
    """``text`` with every records block rewritten from the records."""

    def block(match: re.Match) -> str:
        table, argument = match.group(2), match.group(3)
        if table not in TABLES:
            raise ValueError(f"unknown records table {table!r}")
        render = TABLES[table]
        content = render(records, argument or table)
        return match.group(1) + content + match.group(5)

    return BLOCK.sub(block, text)


def first_difference(path: Path, old: str, new: str) -> str | None:
    for number_, (a, b) in enumerate(zip(old.splitlines(), new.splitlines(), strict=False), 1):
        if a != b:
            return f"{path.relative_to(ROOT)}:{number_}: page has\n  {a}\nrecords give\n  {b}"
    if old != new:
        return f"{path.relative_to(ROOT)}: page and records differ in length"
    return None


def check(records: dict[str, dict[str, Any]], paths: list[Path]) -> str | None:
    """The first difference between the pages and what the records render, or None."""
    for path in paths:
        text = path.read_text()
        if difference := first_difference(path, text, rendered(text, records)):
            return difference
    return None


def check_all(records: dict[str, dict[str, Any]]) -> str | None:
    """The first difference of the pages, else a picture drawn from other records, or None."""
    return check(records, pages()) or learning_curves.stale(records)


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--check", action="store_true", help="exit 1 at the first difference, write nothing")
    parser.add_argument("--records", type=Path, default=RECORDS, help="the records folder (docs/records)")
    sub = parser.add_subparsers(dest="command")
    make = sub.add_parser("record", help="write the record of a finished run directory to docs/records/")
    make.add_argument("run_dir", type=Path)
    make.add_argument("--name", required=True, help="the record's name, also its file name")
    make.add_argument("--test-metrics", type=Path, action="append", default=[],
                      help="translate.py --eval test --metrics-out FILE (repeat for several)")  # fmt: skip
    make.add_argument("--machine", help="the CPU or GPU in words (default: the hardware line's)")
    make.add_argument("--table", action="append", default=[], help="show it in this table (repeat)")
    args = parser.parse_args(argv)
    if args.command == "record":
        from tools.docs.run_record import record  # tensorboard and torch: only this command needs them

        data = record(args.run_dir, args.name, args.test_metrics, args.machine)
        data["tables"] = {table: {"row": 99} for table in args.table}
        out = args.records / f"{args.name}.json"
        out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {out}")
        return 0
    records = load_records(args.records)
    if args.check:
        if difference := check_all(records):
            print(difference)
            return 1
        return 0
    for path in pages():
        text = path.read_text()
        if (new := rendered(text, records)) != text:
            path.write_text(new)
            print(f"rewrote {path.relative_to(ROOT)}")
    if learning_curves.stale(records):
        learning_curves.draw(records)
        print(f"drew {learning_curves.PICTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
