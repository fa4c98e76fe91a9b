"""docs/configuration.md's tables, rendered from the schemas (``seq2seq/config/``), the group
options (``configs/``) and the width records (``docs/records/``), so that each fact keeps its one
owner: a key's type, default and meaning are its schema field and that field's comment.

The page holds each table between ``<!-- config: NAME -->`` and ``<!-- /config -->``; this tool
rewrites them, and ``--check`` says where the page and its sources differ (exit 1).

    python -m tools.docs.config_reference             # rewrite the tables
    python -m tools.docs.config_reference --check     # exit 1 with the first difference
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import re
import sys
import tokenize
import typing
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf

from seq2seq.config import RunConfig, dotted
from seq2seq.launch.composing import compose_run
from seq2seq.launch.recipe import CPU_RECIPE, GPU_RECIPE, what_a_file_sets
from tools.docs.results_page import ROOT, first_difference, load_records, markdown, number

PAGE = ROOT / "docs" / "configuration.md"
CONFIGS = ROOT / "configs"
TRAINER_DEFAULTS = CONFIGS / "trainer" / "default.yaml"
BLOCK = re.compile(r"(<!-- config: ([\w-]+) -->\n)(.*?)(<!-- /config -->)", re.S)
WIDTH_RECORDS = "levers-widths-"  # the width levers of the lever study, 30 minutes each


def yaml_value(value: Any) -> str:
    """A value as it is written in YAML or on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    return str(value)


def code(text: str) -> str:
    """``text`` as a table cell in backticks (a pipe would end the cell)."""
    return "`" + text.replace("|", "\\|") + "`"


def prose(text: str) -> str:
    """``text`` as a table cell: a pipe would end the cell, and ``<run>`` would be read as HTML."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def field_comments(schema: type) -> dict[str, tuple[str, str]]:
    """(annotation as written, the trailing comment) of each field of a dataclass schema."""
    source = inspect.getsource(schema)
    comments = {
        token.start[0]: token.string.lstrip("# ")
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    body = ast.parse(source).body[0].body  # the class statement's body
    return {  # the comment may stand on any line of a field that a formatter wrapped
        node.target.id: (
            ast.unparse(node.annotation),
            " ".join(comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments),
        )
        for node in body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def schema_rows(schema: type, prefix: str, names: list[str]) -> list[list[str]]:
    """key, type, default and meaning of the fields ``names`` of ``schema``, keys as ``prefix`` + name."""
    documented = field_comments(schema)
    defaults = schema()
    rows = []
    for name in names:
        kind, meaning = documented[name]
        rows.append(
            [code(prefix + name), code(kind), code(yaml_value(getattr(defaults, name))), prose(meaning)]
        )
    return rows


def lightning_type(annotation: Any) -> str:
    """A Trainer argument's type as YAML can give it: ``int | str | None``, no Python classes, in one
    order (scalars, containers, None) whatever order the running Python's typing gives the union in."""
    names: list[str] = []
    for arg in typing.get_args(annotation) if typing.get_origin(annotation) is typing.Union else [annotation]:
        if typing.get_origin(arg) is typing.Literal:
            names += [type(value).__name__ for value in typing.get_args(arg)]
        elif arg is type(None):
            names.append("None")
        elif typing.get_origin(arg) in (list, dict) or arg in (int, float, str, bool):
            names.append(str(arg) if typing.get_origin(arg) else arg.__name__)
    rank = {"bool": 0, "int": 1, "float": 2, "str": 3, "None": 5}
    return " | ".join(sorted(dict.fromkeys(names), key=lambda name: rank.get(name, 4)))


def trainer_rows() -> list[list[str]]:
    """The trainer group's keys: ``configs/trainer/default.yaml``'s values and comments, the types
    that ``pytorch_lightning.Trainer`` declares."""
    parameters = inspect.signature(pl.Trainer.__init__).parameters
    rows = []
    for line in TRAINER_DEFAULTS.read_text().splitlines():
        if match := re.fullmatch(r"(\w+):\s*(.*?)\s*(?:#\s*(.*))?", line):
            name, value, meaning = match.groups()
            kind = lightning_type(parameters[name].annotation)
            rows.append([code(f"trainer.{name}"), code(kind), code(value), prose(meaning or "")])
    return rows


def keys_block() -> str:
    """A table per group, in RunConfig's order, then the run's own keys."""
    header = ["key", "type", "default", "meaning"]
    hints = typing.get_type_hints(RunConfig)
    parts, run_level = [], []
    for spec in fields(RunConfig):
        schema = hints[spec.name]
        if is_dataclass(schema):
            about = " ".join(inspect.getdoc(schema).split())
            names = [f.name for f in fields(schema)]
            title = (
                f"### `{spec.name}`\n\n{about} Schema: `{schema.__name__}`; options: `configs/{spec.name}/`."
            )
            parts.append(f"{title}\n\n" + markdown(header, schema_rows(schema, f"{spec.name}.", names)))
        elif spec.name == "trainer":
            parts.append(
                "### `trainer`\n\nArguments of `pytorch_lightning.Trainer`, with the types it declares. The "
                "group has no schema: `configs/trainer/default.yaml` owns these defaults, and any other "
                "Trainer argument takes `+trainer.<name>=...`.\n\n" + markdown(header, trainer_rows())
            )
        else:
            run_level.append(spec.name)
    rows = schema_rows(RunConfig, "", run_level)
    return "\n".join([*parts, "### The run's own keys\n\n" + markdown(header, rows)])


def leading_comment(path: Path) -> str:
    """The first sentence of a YAML file's opening comment (Hydra's ``@package`` line left out)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            lines.append(line.lstrip("# "))
    first = re.split(r"(?<=\.)\s+(?=[A-Za-z])|:\s*\n", "\n".join(lines), maxsplit=1)[0]
    return " ".join(first.split())


def what_it_sets(path: Path) -> str:
    """The options a group file picks (or builds on) and the keys it sets, Hydra's own left out."""
    if path == TRAINER_DEFAULTS:
        return "the defaults of the `trainer.*` keys above"
    entries, values = what_a_file_sets(path)
    picks = [f"`{entry}`" if "=" in entry else f"all of `{entry}`" for entry in entries]
    keys = [code(f"{key}={yaml_value(value)}") for key, value in values.items()]
    return ", ".join(picks + keys) or "nothing: the schema's defaults"


def option_groups() -> list[str]:
    """The folders of configs/ that are groups of train.py, in RunConfig's order, then the rest."""
    folders = {path.name for path in CONFIGS.iterdir() if path.is_dir() and path.name != "hydra"}
    ordered = [spec.name for spec in fields(RunConfig) if spec.name in folders]
    return ordered + sorted(folders - set(ordered))


def options_block() -> str:
    """Every option of every group: what its file says it is, and what it sets."""
    chosen = {
        group: option
        for entry in OmegaConf.load(CONFIGS / "train.yaml").defaults
        if isinstance(entry, DictConfig)
        for group, option in entry.items()
    }
    marks = {("experiment", CPU_RECIPE): "the CPU recipe", ("experiment", GPU_RECIPE): "the GPU recipe"}
    rows = []
    for group in option_groups():
        for path in sorted((CONFIGS / group).glob("*.yaml")):
            mark = marks.get((group, path.stem)) or ("default" if chosen.get(group) == path.stem else "")
            option = code(f"{group}={path.stem}") + (f" ({mark})" if mark else "")
            rows.append([option, prose(leading_comment(path)), what_it_sets(path)])
    return markdown(["option", "what it is", "what it sets"], rows)


def recipes_block() -> str:
    """Every key whose value under a recipe differs from its default above: what ``python train.py``
    runs without and with a CUDA GPU, the options the recipe picks included."""
    defaults = dotted(OmegaConf.structured(RunConfig)) | dotted(
        OmegaConf.create({"trainer": OmegaConf.load(TRAINER_DEFAULTS)})
    )
    recipes = [dotted(compose_run(CONFIGS, [f"experiment={name}"])) for name in (CPU_RECIPE, GPU_RECIPE)]
    rows = [
        [code(key), code(yaml_value(default)), *(code(yaml_value(recipe[key])) for recipe in recipes)]
        for key, default in defaults.items()
        if any(recipe[key] != default for recipe in recipes)
    ]
    header = ["key", "default", f"CPU recipe (`{CPU_RECIPE}`)", f"GPU recipe (`{GPU_RECIPE}`)"]
    return markdown(header, rows)


def widths_block() -> str:
    """The width levers: the same 30-minute CPU run at three widths of the model."""
    runs = sorted(
        (r for name, r in load_records().items() if name.startswith(WIDTH_RECORDS)), key=lambda r: r["steps"]
    )[::-1]
    if not runs or len({(r["machine"]["cpu"], r["budget"], r["seed"], r["experiment"]) for r in runs}) != 1:
        raise ValueError(f"the {WIDTH_RECORDS}* records must be one machine, budget, seed and experiment")
    first = runs[0]
    cores = re.search(r"(\d+) cores", first["machine"]["hardware_line"]).group(1)
    about = (
        f"Each run: {first['budget']} of `experiment={first['experiment']}`, seed {first['seed']}, on a "
        f"{cores}-core {first['machine']['cpu']}, {first['machine']['class']}:\n\n"
    )
    rows = []
    for r in runs:
        beam5 = next(t for t in r["test"] if t["beam"] == 5)
        early = r["validations"][0]
        rows.append([
            r["model"], number(r["tokens_per_s"]),
            f"{number(early['step'])} steps, {number(early['minutes'])} min: {number(early['bleu'])}",
            number(r["steps"]), number(r["val_bleu"]), number(beam5["bleu"]), number(beam5["seconds"]),
            f"`{r['name']}`",
        ])  # fmt: skip
    header = ["model", "tokens/s (median)", "first validation: val BLEU", "steps in the budget",
              "last val BLEU (greedy)", "test BLEU (beam 5)", "test seconds (beam 5)", "record"]  # fmt: skip
    return about + markdown(header, rows)


BLOCKS: dict[str, Callable[[], str]] = {
    "keys": keys_block,
    "options": options_block,
    "recipes": recipes_block,
    "widths": widths_block,
}


def rendered(text: str) -> str:
    """``text`` with every config block rewritten from the schemas, configs and records."""

    def block(match: re.Match) -> str:
        if match.group(2) not in BLOCKS:
            raise ValueError(f"unknown config block {match.group(2)!r}")
        return match.group(1) + BLOCKS[match.group(2)]() + match.group(4)

    return BLOCK.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="exit 1 at the first difference, write nothing")
    args = parser.parse_args(argv)
    text = PAGE.read_text()
    new = rendered(text)
    if args.check:
        difference = first_difference(PAGE, text, new)
        print(difference or f"{PAGE.relative_to(ROOT)} is up to date")
        return 1 if difference else 0
    if new != text:
        PAGE.write_text(new)
        print(f"rewrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
