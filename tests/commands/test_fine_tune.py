"""``init_from``: a new run from a trained model's weights and tokenizer.

``fixtures/orders.tsv`` holds 400 pairs from four templates (goods ordered, sent or sold on a
weekday, two to twelve of them): a domain that ``fixtures/tiny.tsv``, the base model's corpus,
lacks. Fine-tuning on it must raise BLEU on its test split.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from seq2seq.config import ConfigError, validated_run
from seq2seq.data import corpus
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer
from seq2seq.formats.checkpoint import load_model, read_checkpoint, stored_model_config
from seq2seq.inference.backends import open_model
from seq2seq.inference.evaluation import evaluate
from seq2seq.launch.composing import compose_run
from seq2seq.launch.plan import plan_launch
from seq2seq.launch.start import start_run
from seq2seq.training.module import EMA_PREFIX, MODEL_PREFIX
from seq2seq.training.starting_point import open_start
from tests.helpers.compose import CONFIGS, ROOT, model_config, tiny_job, tiny_run
from tests.helpers.in_process import python
from tests.helpers.trained import train_tiny_checkpoint

ORDERS = ROOT / "tests" / "fixtures" / "orders.tsv"
OLDEST = sorted((ROOT / "tests" / "fixtures").glob("checkpoint-*.ckpt"))[0]  # of the earliest version kept
ON_ORDERS = (f"data.path={ORDERS}", "data.valid_size=40", "data.test_size=40")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny experiment trained on the tiny corpus: a model that knows nothing of orders."""
    tmp = tmp_path_factory.mktemp("base")
    start_run(tiny_job(tmp / "run", tmp / "cache", "trainer.max_epochs=4"))
    return tmp / "run" / "checkpoints" / "best.ckpt"


def fine_tune(tmp: Path, base: Path, *overrides: str) -> Path:
    """Train the tiny experiment on the orders from ``base``; returns the run directory."""
    start_run(tiny_job(tmp / "run", tmp / "cache", f"init_from={base}", *ON_ORDERS, *overrides))
    return tmp / "run"


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory: pytest.TempPathFactory, base: Path) -> Path:
    return fine_tune(tmp_path_factory.mktemp("tuned"), base, "trainer.max_epochs=10")


def orders_bleu(ckpt: Path, test_split_of: Path) -> float:
    """Greedy BLEU of ``ckpt`` on the test split of the run that wrote ``test_split_of``."""
    sources, references = corpus.references(
        corpus.load_splits(load_model(test_split_of).data_config)[0]["test"]
    )
    translator = open_model(ckpt, device="cpu", dtype="float32").translator
    return evaluate(translator, sources, references).scores["bleu"]


def test_fine_tuning_on_a_new_domain_raises_its_bleu(base: Path, fine_tuned: Path) -> None:
    tuned = fine_tuned / "checkpoints" / "best.ckpt"
    before, after = orders_bleu(base, tuned), orders_bleu(tuned, tuned)
    assert after > before + 20, (before, after)


def test_the_run_keeps_the_checkpoints_tokenizer(base: Path, fine_tuned: Path) -> None:
    """The orders would teach a BPE other merges; the run encodes them with the base model's."""
    kept = load_model(base).tokenizer.to_dict()
    assert TranslationTokenizer.load(fine_tuned).to_dict() == kept
    assert load_model(fine_tuned / "checkpoints" / "best.ckpt").tokenizer.to_dict() == kept
    orders = [line.split("\t") for line in ORDERS.read_text(encoding="utf-8").splitlines()]
    learnt = TranslationTokenizer.train((s for s, _ in orders), (t for _, t in orders), 300, shared=True)
    assert learnt.to_dict() != kept


def test_it_starts_from_the_weights_inference_loads_with_a_new_schedule(base: Path, tmp_path: Path) -> None:
    """One step at a negligible learning rate: both weight sets are still the base's EMA weights,
    and the schedule (its warmup included) counts from step 0."""
    run = fine_tune(tmp_path, base, "trainer.max_steps=1", "optim.lr=1e-12")
    last = read_checkpoint(run / "checkpoints" / "last.ckpt")
    start = read_checkpoint(base)["state_dict"]
    assert last["global_step"] == 1 and last["lr_schedulers"][0]["last_epoch"] == 1
    for prefix in (MODEL_PREFIX, EMA_PREFIX):
        for name, tensor in start.items():
            if name.startswith(EMA_PREFIX):
                weights = last["state_dict"][prefix + name.removeprefix(EMA_PREFIX)]
                torch.testing.assert_close(weights, tensor, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("model.d_model=64", "has model.d_model=32, this run model.d_model=64"),
        ("data.vocab_size=500", "has data.vocab_size=300, this run data.vocab_size=500"),
        ("data.direction=es-en", "has data.direction=en-es, this run data.direction=es-en"),
    ],
)
def test_a_model_or_tokenizer_that_differs_fails_in_one_line(
    base: Path, tmp_path: Path, override: str, named: str
) -> None:
    with pytest.raises(ConfigError, match=named) as failure:
        fine_tune(tmp_path, base, override)
    assert "\n" not in str(failure.value) and str(failure.value).startswith(f"init_from: {base} ")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_train_py_says_so_in_one_line(base: Path, tmp_path: Path) -> None:
    result = python(
        "train.py", "experiment=tiny", f"init_from={base}", "model.n_heads=4",
        f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: init_from: {base} has model.n_heads=2, this run model.n_heads=4: "
        "set it as the checkpoint has it"
    )


def test_each_key_that_differs_gets_its_own_line(base: Path, tmp_path: Path) -> None:
    result = python(
        "train.py", "experiment=tiny", f"init_from={base}", "model=small", "data.vocab_size=500",
        f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert result.returncode == 1 and errors == lines[-len(errors) :]
    text = "\n".join(errors)
    assert f"error: init_from: {base} has data.vocab_size=300, this run data.vocab_size=500: " in text
    assert f"error: init_from: {base} has model.d_model=32, this run model.d_model=256: " in text
    assert all(line.endswith("set it as the checkpoint has it") for line in errors)
    assert not (tmp_path / "run").exists()


def test_the_tokenizer_keys_come_from_the_checkpoint(base: Path) -> None:
    """The tiny experiment's corpus group says vocab_size 300; the spa_eng group, picked here, 8000."""
    argv = ["--cfg", "job", "experiment=tiny", "data=spa_eng", f"init_from={base}"]  # planned, not claimed
    overrides = plan_launch(argv, {}, CPU, CONFIGS).overrides
    run = validated_run(compose_run(CONFIGS, overrides))
    assert (run.data.vocab_size, run.data.shared_vocab, run.data.tokenizer) == (300, True, "bpe")
    assert open_start(run) is not None


def test_dropout_may_change(base: Path, tmp_path: Path) -> None:
    run = fine_tune(tmp_path, base, "model.dropout=0.2", "trainer.max_steps=2")
    assert load_model(run / "checkpoints" / "last.ckpt").model_config.dropout == 0.2


def test_a_checkpoint_of_an_earlier_version_starts_a_run(tmp_path: Path) -> None:
    sizes = ("model.d_model=16", "model.d_ff=32", "model.n_encoder_layers=1", "model.n_decoder_layers=1")
    run = fine_tune(tmp_path, OLDEST, *sizes, "trainer.max_steps=3")
    trained = load_model(run / "checkpoints" / "last.ckpt")
    assert trained.global_step == 3
    assert trained.tokenizer.to_dict() == load_model(OLDEST).tokenizer.to_dict()


def test_resuming_a_fine_tuned_run_without_its_init_from_fails_in_one_line(
    fine_tuned: Path, tmp_path: Path
) -> None:
    """Left to itself the run would learn a BPE from the orders and read the checkpoint's ids with it."""
    last = fine_tuned / "checkpoints" / "last.ckpt"
    config = tiny_run(
        tmp_path / "run", tmp_path / "cache", *ON_ORDERS, f"ckpt_path={last}", "trainer.max_epochs=11"
    )
    with pytest.raises(ConfigError, match="resume a run started with init_from with that init_from too"):
        start_run(validated_run(config))


def test_resuming_a_fine_tuned_run_with_its_init_from_continues_it(
    base: Path, fine_tuned: Path, tmp_path: Path
) -> None:
    last = fine_tuned / "checkpoints" / "last.ckpt"
    run = fine_tune(tmp_path, base, f"ckpt_path={last}", "trainer.max_epochs=11")
    assert (
        read_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"]
        > read_checkpoint(last)["global_step"]
    )


GPU, CPU = "NVIDIA H100 80GB HBM3", None  # what train.py passes: the CUDA device's name, or None
SHAPES = {  # tiny sizes, each recipe's kind of model: base's post-norm ReLU, small's pre-norm SwiGLU
    "base": {},
    "small": {"norm_first": True, "activation": "swiglu"},
}


def fine_tune_line() -> list[str]:
    """docs/training.md's fine-tuning command, its overrides as train.py receives them."""
    section = (ROOT / "docs" / "training.md").read_text().split("## Fine-tuning", 1)[1]
    line = next(line for line in section.splitlines() if line.startswith("python train.py init_from="))
    return shlex.split(line)[2:]


def launched(ckpt: Path, gpu: str | None, *extra: str) -> list[str]:
    """The page's command on ``ckpt`` and the orders, as train.py hands it to Hydra on that machine."""
    argv = [
        arg.replace("runs/<run>/checkpoints/best.ckpt", str(ckpt)).replace("my-domain.tsv", str(ORDERS))
        for arg in fine_tune_line()
    ]
    return plan_launch(["--cfg", "job", *argv, *extra], {}, gpu, CONFIGS).overrides  # planned, not claimed


@pytest.mark.parametrize(
    ("shape", "gpu"), [("base", CPU), ("small", GPU)], ids=["gpu-run-on-cpu", "cpu-run-on-gpu"]
)
def test_the_pages_fine_tuning_line_takes_the_model_from_the_checkpoint(
    tmp_path: Path, shape: str, gpu: str | None
) -> None:
    """A checkpoint of one recipe's kind of model, fine-tuned where the other recipe is picked."""
    ckpt = train_tiny_checkpoint(tmp_path, steps=1, **SHAPES[shape])
    overrides = launched(ckpt, gpu)
    assert f"experiment=spa_en_{'gpu' if gpu else 'cpu'}" in overrides
    run = validated_run(compose_run(CONFIGS, overrides))
    assert run.model == stored_model_config(ckpt) != model_config("base" if gpu else "small")
    assert open_start(run) is not None  # agrees with the checkpoint
    dropout = validated_run(compose_run(CONFIGS, launched(ckpt, gpu, "model.dropout=0.2"))).model
    assert dropout == replace(stored_model_config(ckpt), dropout=0.2)  # the command line wins


@pytest.mark.parametrize("gpu", [CPU, GPU], ids=["cpu-recipe", "gpu-recipe"])
def test_a_fine_tuning_run_trains_the_checkpoints_model_under_either_recipe(
    tmp_path: Path, gpu: str | None
) -> None:
    ckpt = train_tiny_checkpoint(tmp_path, steps=1, **SHAPES["small" if gpu else "base"])
    limits = [f"output_dir={tmp_path / 'run'}", f"data.cache_dir={tmp_path / 'cache'}", "data.num_workers=0",
              "trainer.max_steps=2", "trainer.accelerator=cpu", "trainer.precision=32-true"]  # fmt: skip
    start_run(validated_run(compose_run(CONFIGS, launched(ckpt, gpu, *limits))))
    assert load_model(tmp_path / "run" / "checkpoints" / "last.ckpt").model_config == stored_model_config(
        ckpt
    )


def test_a_model_group_named_on_the_command_line_is_checked_not_replaced(base: Path) -> None:
    overrides = plan_launch(["--cfg", "job", f"init_from={base}", "model=small"], {}, CPU, CONFIGS).overrides
    assert not [arg for arg in overrides if arg.startswith("model.")]
