"""One run of the default recipe's real training loop, on any version of the code: what
``bench/train/loop.py`` times, ``bench/train/loss_curve.py`` records and ``bench/train/step_profile.py``
profiles.

``train.py``'s own path (the recipe it adds, then ``seq2seq.launch.start.start_run``: the Lightning
Trainer, the module, the data module, EMA, logging and callbacks as it builds them), with one extra
callback added to the Trainer that ``run.build_trainer`` returns: it times the steps after
``warmup``, can record each step's loss and learning rate, and stops the run after ``warmup + steps``
steps. Stopping that way leaves the LR schedule and the dropout decision as in a 30-minute run (a
``trainer.max_steps`` would make the schedule decay within the steps). Only the timed window
counts: validation is off (``trainer.limit_val_batches=0``; early stopping, which would wait for
``val/bleu``, goes with it), since it is not part of a training step.

:func:`loop_in_subprocess` runs this file in a fresh process whose ``PYTHONPATH`` starts with the
tree to run, so that it imports that tree's code; the child imports ``seq2seq.training.run``, which
every version has, and the start of a run where the tree has one. The recipe comes from this tree's
``choose_recipe`` in the process that starts the run (:func:`with_recipe`), as an ``experiment=``
override every version composes.
:func:`code_at` extracts the code at a commit; ``bench/train/step_profile.py`` calls :func:`run_loop`
in-process with its own callbacks.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent  # this tree, whose code chooses the recipe
LOOP_OVERRIDES = ("trainer.limit_val_batches=0", "callbacks.early_stopping_patience=0")


def _tokens(batch: Any) -> int:
    """Real (non-pad) source and target tokens of a batch: what ``train/tokens_per_s`` counts."""
    return int((batch.src != 0).sum() + (batch.tgt_out != 0).sum())


def meter(steps: int, warmup: int, record: bool) -> Any:
    """A Lightning callback that times steps ``warmup + 1 .. warmup + steps`` and then stops the run."""
    import pytorch_lightning as pl

    class Meter(pl.Callback):
        def __init__(self) -> None:
            self.started = self.cpu_started = 0.0
            self.seconds = 0.0
            self.cpu_seconds = 0.0  # this process's threads (a data loader worker's time is not in it)
            self.tokens = 0
            self.losses: list[float] = []
            self.lrs: list[float] = []

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int
        ) -> None:
            step = trainer.global_step
            if record:
                loss = outputs["loss"] if isinstance(outputs, dict) else outputs
                self.losses.append(float(loss))
                self.lrs.append(float(trainer.optimizers[0].param_groups[0]["lr"]))
            if step == warmup:
                self.started, self.cpu_started = time.perf_counter(), time.process_time()
            elif step > warmup:
                self.tokens += _tokens(batch)
            if step >= warmup + steps:
                self.seconds = time.perf_counter() - self.started
                self.cpu_seconds = time.process_time() - self.cpu_started
                trainer.should_stop = True

    return Meter()


def with_recipe(overrides: list[str]) -> list[str]:
    """``overrides`` with the experiment ``python train.py`` adds on this machine, chosen by this
    tree's code (the one the process that starts the runs imports)."""
    import torch

    from seq2seq.launch.recipe import choose_recipe

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return choose_recipe(overrides, gpu, ROOT / "configs")[0]


def compose(tree: Path, overrides: list[str]) -> Any:
    """The config that ``tree``'s ``configs/train.yaml`` composes with ``overrides``."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(tree / "configs"), version_base="1.3"):
        return compose("train", overrides=overrides)


def compose_default(overrides: list[str]) -> Any:
    """The config ``python train.py OVERRIDES`` composes from this tree on this machine."""
    return compose(ROOT, with_recipe(overrides))


def run_loop(
    tree: Path,
    overrides: list[str],
    extra_callbacks: list[Any],
    output_dir: Path,
    loop_overrides: tuple[str, ...] = LOOP_OVERRIDES,
) -> dict[str, Any]:
    """Train the code in ``tree`` (the one this process imports) with ``overrides`` (the recipe
    among them: :func:`with_recipe`) and ``extra_callbacks`` added to its Trainer; returns the
    precision the Trainer ran in. ``loop_overrides=()`` keeps validation on."""
    from seq2seq.training import run

    try:
        from seq2seq.launch.start import start_run
    except ImportError:  # code older than the launch package, whose run.train took the composed config
        start_run = run.train
    takes_run = next(iter(inspect.signature(start_run).parameters)) == "run"  # else the composed config
    if takes_run:
        from seq2seq.config import validated_run
    cfg = compose(tree, [*loop_overrides, *overrides, f"output_dir={output_dir}"])
    build_trainer: Callable[..., Any] = run.build_trainer
    built: list[Any] = []

    def with_extra_callbacks(*args: Any, **kwargs: Any) -> Any:
        trainer = build_trainer(*args, **kwargs)
        trainer.callbacks.extend(extra_callbacks)
        built.append(trainer)
        return trainer

    run.build_trainer = with_extra_callbacks
    try:
        start_run(validated_run(cfg) if takes_run else cfg)
    finally:
        run.build_trainer = build_trainer
    return {"precision": str(built[0].precision)}  # what auto resolved to, in any version of the code


@contextlib.contextmanager
def code_at(repo: Path, ref: str) -> Iterator[Path]:
    """The files of ``repo`` at git ``ref``, extracted into a temporary directory (``git archive``:
    the repository itself is left as it is)."""
    with tempfile.TemporaryDirectory(prefix=f"seq2seq-{ref}-") as directory:
        archive = subprocess.run(["git", "-C", str(repo), "archive", ref], capture_output=True)
        if archive.returncode:
            raise SystemExit(f"error: git archive {ref}: {archive.stderr.decode().strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(directory, filter="data")
        yield Path(directory)


def without_other_code(pythonpath: str) -> str:
    """``pythonpath`` less the entries that hold a ``seq2seq`` package: the run must import
    ``tree``'s code, while the packages it needs may come from PYTHONPATH (a machine that installs
    them with ``pip install --target``)."""
    entries = [entry for entry in pythonpath.split(os.pathsep) if entry]
    return os.pathsep.join(entry for entry in entries if not (Path(entry) / "seq2seq").is_dir())


def pythonpath_of(tree: Path) -> str:
    """A child's ``PYTHONPATH``: ``tree`` first, then this process's entries that hold no other code."""
    return os.pathsep.join(filter(None, [str(tree), without_other_code(os.environ.get("PYTHONPATH", ""))]))


def loop_in_subprocess(
    tree: Path, steps: int, warmup: int, overrides: list[str], record: bool = False
) -> dict[str, Any]:
    """:func:`main` in a fresh process on the code in ``tree``, with this machine's recipe added to
    ``overrides``; its JSON result, or exit with its error."""
    with tempfile.TemporaryDirectory(prefix="loop_result-") as directory:
        out = Path(directory) / "result.json"
        command = [sys.executable, __file__, "--tree", str(tree), "--steps", str(steps)]
        command += ["--warmup", str(warmup), "--out", str(out), *(["--record"] if record else [])]
        command += with_recipe(overrides)
        env = dict(os.environ, PYTHONPATH=pythonpath_of(tree))
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode or not out.is_file():
            raise SystemExit(f"error: the loop run on {tree} failed:\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", type=Path, required=True, help="root of the code version to run")
    parser.add_argument("--steps", type=int, required=True, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="steps before the timed window")
    parser.add_argument("--record", action="store_true", help="also record every step's loss and LR")
    parser.add_argument("--out", type=Path, required=True, help="JSON result")
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides with the experiment, e.g. experiment=spa_en_cpu seed=43"
    )
    args = parser.parse_args()
    tree = args.tree.resolve()
    os.chdir(tree)  # the corpus path in configs/ is relative to the repository root
    try:  # OpenMP's wait policy as train.py sets it: before torch loads
        import seq2seq.machine.threads
    except ModuleNotFoundError:  # a tree whose threads.py sits at the package's top
        import seq2seq.threads  # noqa: F401

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    timer = meter(args.steps, args.warmup, args.record)
    with tempfile.TemporaryDirectory(prefix="loop_run-") as output_dir:
        result = run_loop(tree, args.overrides, [timer], Path(output_dir))
    if timer.seconds == 0.0:
        sys.exit(f"error: the run ended before {args.warmup + args.steps} steps")
    result.update(
        tokens=timer.tokens,
        seconds=timer.seconds,
        tokens_per_s=timer.tokens / timer.seconds,
        tokens_per_cpu_s=timer.tokens / timer.cpu_seconds,
        steps=args.steps,
        losses=timer.losses,
        lrs=timer.lrs,
    )
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
