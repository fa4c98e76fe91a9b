"""The config: one owner for every default (the schemas), a group option that means what its file
says, every schema key overridable without ``+``, and bad values named by their key."""

from dataclasses import asdict, fields, is_dataclass, replace
from typing import get_type_hints

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

from seq2seq.config import ConfigError, DecodeConfig, ModelConfig, RunConfig, dotted, validated, validated_run
from seq2seq.launch.composing import compose_run
from seq2seq.launch.recipe import choose_recipe
from seq2seq.model import Transformer
from tests.helpers.compose import CONFIGS, ROOT, compose_train

SCHEMAS = {f.name: f.default_factory for f in fields(RunConfig) if is_dataclass(f.default_factory)}
EXPERIMENTS = sorted(path.stem for path in (CONFIGS / "experiment").glob("*.yaml"))
MODELS = sorted(path.stem for path in (CONFIGS / "model").glob("*.yaml"))
RUN_LEVEL_DATA_KEYS = {"max_tokens", "shape_rungs", "eval_max_tokens", "num_workers"}  # batches, no corpus


def flat(cfg: DictConfig | dict) -> dict[str, object]:
    """``{"model.d_model": 256, ...}``: the leaves of a config, dotted, its defaults list left out."""
    leaves = dotted(OmegaConf.create(cfg) if isinstance(cfg, dict) else cfg)
    return {key: value for key, value in leaves.items() if key != "defaults"}


def test_the_schemas_cover_every_group_but_the_trainer() -> None:
    assert set(SCHEMAS) == {"model", "data", "optim", "decode", "callbacks", "logger"}
    groups = {path.name for path in CONFIGS.iterdir() if path.is_dir()}
    assert set(SCHEMAS) | {"trainer"} <= groups


@pytest.mark.parametrize("group", sorted(SCHEMAS))
def test_no_group_file_repeats_a_schema_default(group: str) -> None:
    defaults = flat(asdict(SCHEMAS[group]()))
    for path in sorted((CONFIGS / group).glob("*.yaml")):
        repeated = {key for key, value in flat(OmegaConf.load(path)).items() if defaults[key] == value}
        assert not repeated, f"{path.relative_to(ROOT)} repeats the schema's defaults of {sorted(repeated)}"


def test_no_trainer_option_repeats_the_trainer_default() -> None:
    """The trainer group has no schema: configs/trainer/default.yaml owns its defaults."""
    defaults = flat(OmegaConf.load(CONFIGS / "trainer" / "default.yaml"))
    for path in sorted((CONFIGS / "trainer").glob("*.yaml")):
        if path.stem != "default":
            repeated = {
                key for key, value in flat(OmegaConf.load(path)).items() if defaults.get(key) == value
            }
            assert not repeated, f"{path.name} repeats trainer/default.yaml's {sorted(repeated)}"


def test_train_yaml_sets_no_value_of_the_run_schema() -> None:
    assert set(OmegaConf.load(CONFIGS / "train.yaml")) == {"defaults", "hydra"}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_an_experiment_sets_only_what_changes_and_no_key_of_the_model_or_corpus(experiment: str) -> None:
    """Every value an experiment states differs from what its chosen options give without it; it
    picks model and data options but changes none of their keys (docs/training.md)."""
    raw = OmegaConf.load(CONFIGS / "experiment" / f"{experiment}.yaml")
    stated = flat(raw)
    assert not [key for key in stated if key.startswith("model.")]
    assert {key.split(".")[1] for key in stated if key.startswith("data.")} <= RUN_LEVEL_DATA_KEYS
    picks = [
        f"{group.removeprefix('override /')}={option}"
        for entry in raw.defaults
        for group, option in entry.items()
    ]
    without = flat(compose_train("~experiment", *picks))
    assert not {key for key, value in stated.items() if without[key] == value}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_schema_key_takes_an_override_without_plus(experiment: str) -> None:
    schema_keys = set(dotted(OmegaConf.structured(RunConfig)))
    assert schema_keys <= set(dotted(compose_train(f"experiment={experiment}")))
    cfg = compose_train(f"experiment={experiment}", "decode.sampling=true", "optim.ema_decay=0.99", "seed=7")
    assert (cfg.decode.sampling, cfg.optim.ema_decay, cfg.seed) == (True, 0.99, 7)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
@pytest.mark.parametrize("model", MODELS)
def test_a_model_choice_trains_what_its_file_says_under_every_experiment(experiment: str, model: str) -> None:
    """configs/model/<name>.yaml over the schema's defaults, whatever the experiment."""
    from_file = validated(ModelConfig, OmegaConf.load(CONFIGS / "model" / f"{model}.yaml"), "model")
    composed = validated_run(compose_train(f"experiment={experiment}", f"model={model}")).model
    assert composed == from_file


def test_the_models_the_project_trains() -> None:
    """small: the CPU recipe's pre-norm SwiGLU at 683 (the lever study); small_postnorm: the ReLU model
    before it; the README's override for a transformers export gives GELU at 1,024."""
    small, postnorm = (
        validated_run(compose_train(f"model={name}")).model for name in ("small", "small_postnorm")
    )
    assert (small.activation, small.d_ff, small.norm_first) == ("swiglu", 683, True)
    assert (postnorm.activation, postnorm.d_ff, postnorm.norm_first) == ("relu", 1024, False)
    assert replace(small, activation="relu", d_ff=1024, norm_first=False) == postnorm
    gelu = validated_run(compose_train("model.activation=gelu", "model.d_ff=1024")).model
    assert (gelu.activation, gelu.d_ff, gelu.norm_first) == ("gelu", 1024, True)


CHANGED_SINCE_33 = {  # on purpose: the tiny run's heatmaps were most of its time (one test draws them);
    # the recipes' clock alone ends them, where a 50-epoch cap stopped the GPU recipe early
    "tiny": {"logger.attention_images": False},
    "spa_en_cpu": {"trainer.max_epochs": -1},
    "spa_en_gpu": {"trainer.max_epochs": -1},
}


@pytest.mark.parametrize(
    ("experiment", "gpu"), [("spa_en_cpu", None), ("spa_en_gpu", "NVIDIA H100"), ("tiny", None)]
)
def test_each_experiment_resolves_to_what_it_trained_before_the_schemas_owned_the_defaults(
    experiment: str, gpu: str | None
) -> None:
    """``python train.py`` (the recipe train.py adds, not named) still trains exactly the run of
    main at a2c4f28, and so do the GPU recipe and the tests' tiny run (tests/fixtures), but for the
    changes made on purpose since (``CHANGED_SINCE_33``)."""
    argv = [] if experiment != "tiny" else ["experiment=tiny"]
    overrides, _ = choose_recipe(argv, gpu, CONFIGS)
    run = validated_run(compose_run(CONFIGS, overrides))
    now = flat({**asdict(run), "output_dir": None})
    before = flat(OmegaConf.load(ROOT / "tests" / "fixtures" / "resolved_before_33.yaml")[experiment])
    before |= CHANGED_SINCE_33.get(experiment, {})
    assert {key: now.get(key) for key in before} == before


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.d_model=30"], "model.d_model (30) must be divisible by model.n_heads"),
        (["model.n_heads=-2"], "model.n_heads must be > 0"),
        (["model.d_ff=0"], "model.d_ff must be > 0"),
        (["model.dropout=1.0"], "model.dropout must be in [0, 1)"),
        (["model.activation=swish"], "model.activation must be one of relu, gelu, swiglu, got 'swish'"),
        (["optim.warmup_steps=0"], "optim.warmup_steps must be > 0"),
        (["data.direction=en-fr"], "names 'fr', not in data.columns"),
        (["data.max_tokens=10"], "data.max_tokens (10) is smaller than the longest"),
        (["decode.beam_size=2", "decode.nbest=3"], "decode.nbest (3) must be <="),
        (["callbacks.checkpoint_every_n_steps=-5"], "callbacks.checkpoint_every_n_steps must be >= 0"),
        (["logger.samples=-1"], "logger.samples must be >= 0"),
        (["decode.sampling=true"], "decode.sampling=true would make val/bleu random"),
        (["decode.capture=true"], "decode.capture=true is for translating (translate.py --capture)"),
        (["data.max_length=200"], "data.max_length (200) + 2 exceeds model.max_positions (128)"),
        (["trainer.max_time=01:00:00"], "trainer.max_time must be DD:HH:MM:SS (00:01:00:00 is an hour)"),
        (["trainer.max_time=60"], "trainer.max_time must be DD:HH:MM:SS (00:01:00:00 is an hour), got 60"),
        (["trainer.max_time=00:00:00:00"], "trainer.max_time must be longer than 0, got '00:00:00:00'"),
        (
            ["trainer.gradient_clip_val=-1"],
            "trainer.gradient_clip_val must be a number >= 0 (0 = off), got -1",
        ),
        (
            ["trainer.gradient_clip_val=nan"],
            "trainer.gradient_clip_val must be a number >= 0 (0 = off), got nan",
        ),
        (
            ["trainer.val_check_interval=nan"],
            "trainer.val_check_interval must be a share of an epoch in (0, 1]",
        ),
        (
            ["trainer.val_check_interval=1.5"],
            "trainer.val_check_interval must be a share of an epoch in (0, 1]",
        ),
        (["trainer.limit_train_batches=-0.5"], "trainer.limit_train_batches must be a share of an epoch"),
        (["trainer.limit_train_batches=0"], "or a number of batches >= 1, got 0"),
        (
            ["trainer.accumulate_grad_batches=0"],
            "trainer.accumulate_grad_batches must be a whole number >= 1",
        ),
        (
            ["trainer.check_val_every_n_epoch=0"],
            "trainer.check_val_every_n_epoch must be >= 1 or null, got 0",
        ),
        (["trainer.num_sanity_val_steps=-2"], "trainer.num_sanity_val_steps must be >= 0, or -1 for all"),
        (["optim.weight_decay=-1"], "optim.weight_decay must be >= 0, got -1.0"),
        (["optim.eps=-1"], "optim.eps must be > 0, got -1.0"),
        (["optim.betas=[1.5,0.98]"], "optim.betas must be in [0, 1), got 1.5"),
        (["optim.betas=[0.9]"], "optim.betas must be two numbers, got [0.9]"),
    ],
)
def test_a_bad_value_names_its_key_in_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        validated_run(compose_train(*overrides))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.shared_vocab=false"], "model.tie_embeddings=true shares one embedding matrix"),
        (["decode.top_k=5"], "decode.top_k shape sampling, which validation never does"),
        (["decode.temperature=0.7", "decode.top_p=0.9"], "decode.temperature, decode.top_p shape sampling"),
        (["optim.schedule=inverse_sqrt", "optim.decay_shape=1-sqrt"], "set optim.schedule=wsd"),
        (["data.hub_config=en-es"], "data.hub_config is read only with data.hub_dataset=NAME"),
        (["data.drop_train_overlap=true"], "data.drop_train_overlap=true needs data.valid_path"),
        (["data.valid_path=dev.tsv", "data.streaming=true"], "need data.streaming=false"),
        (["data.test_path=[]"], "data.test_path must be a path or a list of paths"),
    ],
)
def test_a_key_that_would_be_ignored_is_refused_in_one_line(overrides: list[str], message: str) -> None:
    """Two vocabularies of one size would tie silently; the other keys mean nothing given the rest."""
    with pytest.raises(ConfigError) as err:
        validated_run(compose_train(*overrides))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_separate_vocabularies_train_untied() -> None:
    run = validated_run(compose_train("data.shared_vocab=false", "model.tie_embeddings=false"))
    assert not run.model.tie_embeddings


FLOAT_KEYS = [
    f"{group}.{name}"
    for group, schema in SCHEMAS.items()
    for name, hint in get_type_hints(schema).items()
    if hint in (float, list[float])
]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_every_float_key_refuses_a_value_that_is_not_finite(key: str, value: str) -> None:
    group, name = key.split(".")
    given = f"[0.9,{value}]" if isinstance(getattr(SCHEMAS[group](), name), list) else value
    with pytest.raises(ConfigError) as err:
        validated(get_type_hints(RunConfig)[group], OmegaConf.from_dotlist([f"{name}={given}"]), group)
    assert str(err.value).startswith(f"{key} must be a finite number, got ")


def test_a_nan_learning_rate_is_one_line_at_compose_time() -> None:
    with pytest.raises(ConfigError, match=r"^optim\.lr must be a finite number, got nan$"):
        validated_run(compose_train("experiment=tiny", "optim.lr=nan"))


def test_a_time_budget_in_lightnings_format_is_taken() -> None:
    assert validated_run(compose_train("trainer.max_time=00:01:00:00")).trainer["max_time"] == "00:01:00:00"


@pytest.mark.parametrize(
    "override",
    [
        "trainer.val_check_interval=00:00:10:00",
        "trainer.val_check_interval=200",
        "trainer.limit_train_batches=0.5",
        "trainer.limit_val_batches=0",
        "trainer.gradient_clip_val=0",
        "trainer.check_val_every_n_epoch=null",
        "trainer.num_sanity_val_steps=-1",
    ],
)
def test_the_trainer_values_lightning_documents_are_taken(override: str) -> None:
    """The range rules refuse what would train wrongly or not at all, not what Lightning means."""
    validated_run(compose_train("experiment=tiny", override))


def test_unknown_key_is_rejected_at_compose_time() -> None:
    with pytest.raises(ConfigCompositionException, match="d_modle"):
        compose_train("model.d_modle=128")


def test_unknown_key_in_a_yaml_file_names_the_key() -> None:
    with pytest.raises(ConfigError, match="d_modle"):
        validated(ModelConfig, {"d_modle": 128}, "model")


@pytest.mark.parametrize("name", MODELS)
def test_every_shipped_model_config_builds(name: str) -> None:
    model = Transformer(validated_run(compose_train(f"model={name}")).model, 8000, 8000)
    assert sum(p.numel() for p in model.parameters()) > 0


def test_beam_is_greedy_with_a_wider_beam() -> None:
    greedy = validated(DecodeConfig, compose_train("decode=greedy").decode, "decode")
    beam = validated(DecodeConfig, compose_train("decode=beam").decode, "decode")
    assert beam == replace(greedy, beam_size=5)
