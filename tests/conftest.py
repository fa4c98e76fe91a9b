"""Shared test fixtures: the tiny corpus and model configs, and a real tiny checkpoint file."""

from __future__ import annotations

import fcntl
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch._inductor.config

from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.formats.checkpoint import save_atomically, seq2seq_entry
from seq2seq.inference.backends import open_model
from seq2seq.inference.cli import main
from seq2seq.inference.translator import Translator
from seq2seq.machine.hardware import threads_each
from seq2seq.model import Transformer
from seq2seq.training.module import MODEL_PREFIX
from tests.helpers.compose import model_config
from tests.helpers.cpu_classes import CPU_CLASSES, fake_cpu
from tests.helpers.tiny import BLEU, CORPUS, STEP, tiny_tokenizer
from tests.helpers.trained import MEMORISED_PAIRS, train_tiny_checkpoint

FILES_SHOWN = 10  # the slowest test files, listed after the slowest tests


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker, and each process its tests start, gets its share of the cores:
    N workers each running every core's worth of threads would spend the cores waiting on each other.
    So do inductor's compilers: with one core a worker compiles its kernels itself, where a pool of
    compiler processes would first spend seconds starting and importing torch."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers:
        threads = threads_each(workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(threads)
        torch.set_num_threads(threads)
        torch._inductor.config.compile_threads = threads  # read at import, which conftest's imports did


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist each worker's share of the tests starts with its share of the ``slow``
    ones: ``--dist worksteal`` hands each worker an equal run of the collection and lets an idle
    worker take over the end of another's, so the suite ends on short tests, not one long test
    that keeps a worker busy while the others wait."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    fast = [item for item in items if not item.get_closest_marker("slow")]
    ordered: list[pytest.Item] = []
    for worker in range(workers):
        share = (len(items) - len(ordered)) // (workers - worker)  # as worksteal splits the collection
        own = slow[worker::workers]
        taken = max(0, share - len(own))
        ordered += own + fast[:taken]
        fast = fast[taken:]
    items[:] = ordered + fast


@pytest.hookimpl(trylast=True)  # after --durations' slowest tests
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """With ``--durations``, the test files that took longest, their tests' phases added up: where a
    run's time goes when it is spread over many short tests."""
    if terminalreporter.config.option.durations is None:
        return
    seconds: Counter[str] = Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                seconds[report.nodeid.split("::")[0]] += report.duration
    terminalreporter.write_sep("=", f"slowest {FILES_SHOWN} test files")
    for path, total in seconds.most_common(FILES_SHOWN):
        terminalreporter.write_line(f"{total:7.2f}s {path}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--as-cpu",
        choices=sorted(CPU_CLASSES),
        help="let precision/dtype 'auto' decide as such a CPU would (faked flags and bf16 probe), "
        "whatever CPU runs the suite: no test's outcome may change",
    )


@pytest.fixture(scope="session", autouse=True)
def as_cpu(request: pytest.FixtureRequest) -> Iterator[None]:
    """``--as-cpu NAME``: the whole session sees a CPU of that class (in this process)."""
    name = request.config.getoption("--as-cpu")
    with pytest.MonkeyPatch.context() as monkeypatch:
        if name:
            fake_cpu(monkeypatch, name)
        yield


def _tiny_data(cache_dir: Path) -> DataConfig:
    return DataConfig(
        path=str(CORPUS),
        valid_size=12,
        test_size=12,
        vocab_size=300,
        max_tokens=512,
        eval_max_tokens=1024,
        num_workers=0,
        cache_dir=str(cache_dir),
    )


@pytest.fixture
def tiny_data_cfg(tmp_path: Path) -> DataConfig:
    """DataConfig for ``fixtures/tiny.tsv`` (300 pairs) with its cache under ``tmp_path``."""
    return _tiny_data(tmp_path / "cache")


@pytest.fixture(scope="session")
def tiny_model_cfg() -> ModelConfig:
    """``configs/model/tiny.yaml``: the model the ``tiny`` experiment trains."""
    return model_config("tiny")


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_model_cfg: ModelConfig) -> Path:
    """A checkpoint with a real tokenizer and random weights, written as training writes one."""
    tmp = tmp_path_factory.mktemp("ckpt")
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    model = Transformer(tiny_model_cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    decode_cfg = DecodeConfig(beam_size=2, max_len_a=1.0, max_len_b=4, min_len=1)  # min_len: never ""
    meta = seq2seq_entry(tiny_model_cfg, decode_cfg, _tiny_data(tmp / "cache"), tokenizer, MODEL_PREFIX, BLEU)
    path = tmp / "tiny.ckpt"
    state = {MODEL_PREFIX + name: tensor for name, tensor in model.state_dict().items()}
    save_atomically({"state_dict": state, "global_step": STEP, "seq2seq": meta}, path)
    return path


@pytest.fixture(scope="module")
def translator(checkpoint: Path) -> Translator:
    """The float32 reference that other paths (server, batching) must equal to the last digit."""
    return open_model(checkpoint, device="cpu", dtype="float32").translator


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture) -> Callable[..., tuple[int, list[str], str]]:
    """Runs ``translate.py``'s main in-process: returns (exit code, stdout lines, stderr)."""

    def run(*argv: str) -> tuple[int, list[str], str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out.splitlines(), captured.err

    return run


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(directory)``'s file, built once per run: under pytest-xdist by the first worker that
    asks, while the others wait on a lock and then read it (each worker is a session of its own)."""
    worker_temp = factory.getbasetemp()
    run_temp = worker_temp.parent if os.environ.get("PYTEST_XDIST_WORKER") else worker_temp
    with (run_temp / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        directory, built = run_temp / name, run_temp / f"{name}.built"
        if not built.exists():
            directory.mkdir(exist_ok=True)  # a worker whose build failed may have left it
            built.write_text(build(directory).name, encoding="utf-8")  # the mark once all is written
        return directory / built.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def trained_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the tiny model trained on ``fixtures/tiny.tsv`` (see ``trained.py``)."""
    return built_once(tmp_path_factory, "trained", train_tiny_checkpoint)


@pytest.fixture(scope="session")
def memorised_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model trained until it has learnt the fixture's first :data:`MEMORISED_PAIRS` pairs by
    heart (greedy BLEU about 99 on them): next-token margins as clear as a good model's, so that
    the rounding of bf16 moves scores but not translations."""
    return built_once(
        tmp_path_factory,
        "memorised",
        lambda directory: train_tiny_checkpoint(
            directory, steps=200, batch_size=MEMORISED_PAIRS, pairs=MEMORISED_PAIRS
        ),
    )


@pytest.fixture(scope="session")
def ct2_export(tmp_path_factory: pytest.TempPathFactory, trained_ckpt: Path) -> Path:
    """``trained_ckpt`` exported to CTranslate2 with float32 weights (the checkpoint's tokens), once
    per run: the tests that open it only read it."""
    from seq2seq.export.to_ctranslate2 import export_checkpoint

    return built_once(
        tmp_path_factory,
        "ct2-export",
        lambda folder: export_checkpoint(trained_ckpt, folder / "model", "float32", force=True),
    )


@pytest.fixture(scope="session")
def hf_export(tmp_path_factory: pytest.TempPathFactory, trained_ckpt: Path) -> Path:
    """``trained_ckpt`` exported as a transformers folder, once per run; the tests only read it."""
    pytest.importorskip("transformers", reason="the transformers export needs pip install -e '.[hf]'")
    from seq2seq.export.to_transformers import export_to_transformers

    return built_once(
        tmp_path_factory,
        "hf-export",
        lambda folder: export_to_transformers(trained_ckpt, folder / "model", force=True),
    )
