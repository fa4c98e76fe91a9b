"""DDP: each rank decodes a share of the validation split, every rank scores all of it, the budget
follows rank 0, and the global batch is stated at the start."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pytorch_lightning.callbacks import Timer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.config import ModelConfig
from seq2seq.formats.checkpoint import read_checkpoint
from seq2seq.inference.cli import main as translate_main
from seq2seq.model import Transformer
from seq2seq.training import budget
from seq2seq.training.budget import Budget
from seq2seq.training.sharding import shard, translate_sharded, unshard
from tests.helpers.compose import ddp_training

LENGTHS = [5, 40, 12, 12, 3, 27, 8, 40, 1, 19, 6]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 16])
def test_shards_are_disjoint_balanced_and_reassemble_in_source_order(world_size: int) -> None:
    shards = [shard(LENGTHS, rank, world_size) for rank in range(world_size)]
    assert sorted(i for part in shards for i in part) == list(range(len(LENGTHS)))
    sizes = [len(part) for part in shards]
    assert max(sizes) - min(sizes) <= 1
    texts = [sum(LENGTHS[i] for i in part) for part in shards]
    assert max(texts) - min(texts) <= max(LENGTHS)  # dealt longest first: at most one sentence apart
    parts = [[f"hyp{i}" for i in part] for part in shards]
    assert unshard(parts, LENGTHS) == [f"hyp{i}" for i in range(len(LENGTHS))]


def test_one_process_translates_everything_itself() -> None:
    sources = ["b", "aaa", "cc"]
    assert translate_sharded(lambda share: [s.upper() for s in share], sources, 0, 1) == ["B", "AAA", "CC"]


class LockstepStrategy:
    """One rank's broadcasts in a simulated two-rank run, called rank 0 first: every rank receives
    what rank 0 sent in the same call, as with a real collective."""

    def __init__(self, rank: int, sent: list[Any]) -> None:
        self.rank, self.sent, self.calls = rank, sent, 0

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if self.rank == 0:
            self.sent.append(obj)
        self.calls += 1
        return self.sent[self.calls - 1]


class SpentTimer(Timer):
    """A 400-second ``max_time`` of which ``elapsed`` seconds are spent, as this rank's clock says."""

    def __init__(self) -> None:
        super().__init__(duration=timedelta(seconds=400))
        self.elapsed = 0.0

    def time_elapsed(self, stage: Any = None) -> float:
        return self.elapsed


def test_budget_ranks_decide_together_on_rank_0s_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1's clock lags rank 0's: it must still join every broadcast and take rank 0's estimate."""
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(budget, "time", SimpleNamespace(monotonic=lambda: clock.now))
    model = Transformer(ModelConfig(d_model=16, n_heads=2, d_ff=32, dropout=0.1), 50, 50)
    module, sent = SimpleNamespace(model=model, compile_seconds=lambda: 0.0), []
    ranks = []
    for rank in range(2):
        trainer = SimpleNamespace(
            global_step=0,
            max_steps=-1,
            strategy=LockstepStrategy(rank, sent),
            callbacks=[SpentTimer()],
            num_training_batches=10,
            accumulate_grad_batches=1,
        )
        ranks.append((Budget(dropout_min_epochs=1), trainer))
    # 1 s per step on rank 0's clock, 0.9 s on rank 1's: rank 0 has measured its 20-second window
    # (5 % of max_time) at step 20, rank 1 would at step 23.
    for step in range(30):
        for rank, (callback, trainer) in enumerate(ranks):
            clock.now = step * (1.0 if rank == 0 else 0.9)
            trainer.global_step = step
            trainer.callbacks[0].elapsed = clock.now
            callback.on_train_batch_end(trainer, module, None, None, step)
        assert ranks[0][1].strategy.calls == ranks[1][1].strategy.calls, f"step {step}"
    assert ranks[0][0].epochs == ranks[1][0].epochs == pytest.approx(40.0)  # (20 + 1 step/s × 380 s) / 10


def sample_hypotheses(tensorboard: Path) -> list[str]:
    """The hypothesis column of the last ``val/samples`` table (written by rank 0)."""
    events = EventAccumulator(str(tensorboard), size_guidance={"tensors": 0})
    events.Reload()
    table = events.Tensors("val/samples/text_summary")[-1].tensor_proto.string_val[0].decode()
    return [row.rsplit(" | ", 1)[1].removesuffix(" |") for row in table.splitlines()[2:]]


@pytest.mark.slow
def test_ddp_validation_bleu_equals_the_single_process_evaluation(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    result = ddp_training(
        run,
        tmp_path / "cache",
        2,
        "trainer.max_epochs=1",
        "trainer.max_time=00:01:00:00",  # with the next line: the budget's rank-0 broadcasts each step
        "optim.dropout_min_epochs=1",
        "logger.samples=100",  # the sample panel shows every validation hypothesis
        "logger.attention_images=false",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    logs = " ".join((result.stdout + result.stderr).split())  # the rich handler wraps long lines
    stated = "global batch: up to 1024 padded tokens per optimizer step = data.max_tokens 512 x 2 processes"
    assert stated in logs
    best = run / "checkpoints" / "best.ckpt"
    logged_bleu = read_checkpoint(best)["seq2seq"]["best_bleu"]  # one validation: its val/bleu
    hypotheses = tmp_path / "hypotheses.txt"
    # The checkpoint carries the tiny run's decode config and data.eval_max_tokens; fp32 as trained.
    args = ["--ckpt", str(best), "--eval", "valid", "--dtype", "float32", "--device", "cpu"]
    assert translate_main([*args, "--output", str(hypotheses)]) == 0
    assert f"BLEU = {logged_bleu:.2f} " in capsys.readouterr().out
    assert sample_hypotheses(run / "tensorboard") == hypotheses.read_text(encoding="utf-8").splitlines()
