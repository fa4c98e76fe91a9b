"""docs/configuration.md: its tables are what the schemas, configs and records give, every key and
option is on it with a meaning, and its worked experiment composes as ``train.py`` would compose it."""

from __future__ import annotations

import re
import shutil
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from seq2seq.config import RunConfig, dotted, validated_run
from seq2seq.launch.composing import compose_run
from tests.helpers.compose import CONFIGS
from tools.docs import config_reference

PAGE = config_reference.PAGE
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)
NAMED = re.compile(r"^# (configs/\w+/\w+\.yaml)(?:: python train\.py (.+))?$", re.M)


def test_the_page_shows_what_the_schemas_configs_and_records_give() -> None:
    text = PAGE.read_text()
    difference = config_reference.first_difference(PAGE, text, config_reference.rendered(text))
    assert difference is None, f"{difference}\n(run python -m tools.docs.config_reference)"


def test_the_page_has_every_table() -> None:
    shown = {match.group(2) for match in config_reference.BLOCK.finditer(PAGE.read_text())}
    assert shown == set(config_reference.BLOCKS)


def test_every_key_and_every_option_is_on_the_page() -> None:
    """Whatever the renderer does: the composed config's keys and configs/'s files are all named."""
    text = PAGE.read_text()
    leaves = list(dotted(compose_run(CONFIGS, [])))
    assert not [k for k in leaves if f"`{k}`" not in text]
    for group in config_reference.option_groups():
        for path in (CONFIGS / group).glob("*.yaml"):
            assert f"`{group}={path.stem}`" in text


GROUPS = [f.default_factory for f in fields(RunConfig) if is_dataclass(f.default_factory)]


@pytest.mark.parametrize("schema", [RunConfig, *GROUPS], ids=lambda schema: schema.__name__)
def test_every_key_of_a_schema_says_what_it_means(schema: type) -> None:
    documented = config_reference.field_comments(schema)
    keys = [f.name for f in fields(schema) if not is_dataclass(f.default_factory)]  # not a group
    assert not [name for name in keys if not documented[name][1]], "a field without a comment"


def test_every_trainer_key_says_what_it_means() -> None:
    assert all(meaning for *_, meaning in config_reference.trainer_rows())


def test_a_changed_comment_is_a_difference_on_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    comments = config_reference.field_comments

    def changed(schema: type) -> dict[str, tuple[str, str]]:
        return {name: (kind, f"{meaning}!") for name, (kind, meaning) in comments(schema).items()}

    monkeypatch.setattr(config_reference, "field_comments", changed)
    text = PAGE.read_text()
    assert config_reference.first_difference(PAGE, text, config_reference.rendered(text)) is not None


def test_the_worked_experiment_composes_as_train_py_composes_it(tmp_path: Path) -> None:
    """The page's YAML files, written where their first comment says, give the run it describes."""
    configs = tmp_path / "configs"
    shutil.copytree(CONFIGS, configs)
    commands = []
    for block in YAML_BLOCK.findall(PAGE.read_text()):
        name, command = NAMED.search(block).groups()
        (tmp_path / name).write_text(block)
        commands += [command.split()] if command else []
    assert commands == [["experiment=es_en_1h"]]
    run = validated_run(compose_run(configs, commands[0]))
    cpu = validated_run(compose_run(CONFIGS, ["experiment=spa_en_cpu"]))
    assert (run.data.path, run.data.columns, run.data.direction) == (
        ["corpus/train.es", "corpus/train.en"],
        ["es", "en"],
        "es-en",
    )
    assert run.trainer["max_time"] == "00:01:00:00"
    assert (run.model, run.optim) == (cpu.model, cpu.optim)  # the rest is the CPU recipe's
    experiment = OmegaConf.load(configs / "experiment" / "es_en_1h.yaml")
    assert set(experiment) == {"defaults", "trainer"}  # no key of the model or the corpus
