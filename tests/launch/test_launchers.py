"""Launchers: torchrun on one machine and as two "nodes", the run directory every process of a
launch agrees on, Hydra's files written once, and ``python -m bench.train.step --device cuda``
without CUDA.

The multi-process tests train the tiny experiment on CPU processes talking over gloo; SLURM and
real GPUs cannot run here (docs/distributed.md, Launchers).
"""

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seq2seq.launch.ranks import launch_id, rank_overrides, run_dir_conflict
from tests.helpers.compose import ROOT

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
DEFAULT_RUN_DIR = "runs/${launch_id:${now:%Y-%m-%d_%H-%M-%S}}"  # configs/train.yaml (quoted below: it nests)


def tiny_training(cache_dir: Path, run_dir: str, *overrides: str) -> list[str]:
    """``train.py`` arguments for one seconds-long epoch of the tiny experiment on CPU processes."""
    return [
        "train.py",
        "experiment=tiny",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.max_epochs=1",
        f"data.cache_dir={cache_dir}",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def assert_one_set_of_hydra_files(run_dir: Path, ranks: int) -> None:
    """Rank 0 wrote ``.hydra/`` and ``train.log``; every other rank only a log file of its own."""
    overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "train_rank" not in overrides  # rank 0's, not overwritten by another rank's
    logs = sorted(path.name for path in run_dir.glob("*.log"))
    assert logs == ["train.log"] + [f"train_rank{rank}.log" for rank in range(1, ranks)]


def builds(run_dir: Path) -> dict[str, int]:
    """How many times each process's log says it built a data cache (corpus, split, tokenizer, ids)."""
    starts = "] - building the "  # a message that begins so (the waiting one says "is building the")
    return {path.name: path.read_text().count(starts) for path in sorted(run_dir.glob("*.log"))}


def tokenizer_files(cache_dir: Path) -> dict[str, bytes]:
    """The bytes of the cached tokenizer's files, by name (its directory's digest not assumed)."""
    [directory] = [path for path in cache_dir.rglob("tokenizer-*") if path.is_dir()]
    return {path.name: path.read_bytes() for path in directory.iterdir() if path.is_file()}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"SLURM_JOB_ID": "7"}, None),  # an allocation's shell, not an srun step: one process
        ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "2"}, "slurm-7.2"),
        ({"TORCHELASTIC_RUN_ID": "none"}, None),
        ({"TORCHELASTIC_RUN_ID": "abc"}, "torchrun-abc"),
        ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "TORCHELASTIC_RUN_ID": "none"}, "slurm-7.0"),
    ],
)
def test_launch_id_is_what_every_process_of_a_launch_sees(env, expected):
    assert launch_id(env) == expected


def test_rank_zero_keeps_hydra_files_and_others_get_their_own_log():
    assert rank_overrides({"RANK": "0"}) == rank_overrides({}) == []
    ours = ["hydra.output_subdir=null", "hydra.job.name=train_rank3"]
    assert rank_overrides({"RANK": "3", "SLURM_PROCID": "1"}) == ours
    assert rank_overrides({"SLURM_PROCID": "3"}) == ours


def test_torchrun_without_a_shared_id_needs_an_explicit_run_dir():
    static = {"TORCHELASTIC_RUN_ID": "none", "WORLD_SIZE": "2"}
    assert "--rdzv-id" in run_dir_conflict(["experiment=tiny"], static)
    assert run_dir_conflict(["hydra.run.dir=/shared/run"], static) is None
    assert run_dir_conflict([], {**static, "WORLD_SIZE": "1"}) is None
    assert run_dir_conflict([], {**static, "TORCHELASTIC_RUN_ID": "abc"}) is None
    assert run_dir_conflict([], {**static, "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}) is None
    assert run_dir_conflict([], {"WORLD_SIZE": "2"}) is None  # Lightning's children: run dir passed on


@pytest.mark.skipif(torch.cuda.is_available(), reason="refusal only where torch sees no CUDA GPU")
def test_bench_on_cuda_without_a_gpu_says_so_in_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "bench.train.step", "--device", "cuda"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert (result.stdout + result.stderr).strip().splitlines() == [
        f"error: --device cuda, but torch {torch.__version__} sees no CUDA GPU on this machine"
    ]


@pytest.mark.slow
def test_torchrun_two_processes_share_the_default_run_directory(tmp_path):
    """Both processes name the run directory themselves, from torchrun's rendezvous id."""
    runs = tmp_path / "runs"
    result = subprocess.run(
        [
            TORCHRUN,
            "--standalone",
            "--nproc_per_node",
            "2",
            *tiny_training(tmp_path / "cache", f"'{tmp_path}/{DEFAULT_RUN_DIR}'", "trainer.devices=2"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = runs.iterdir()
    assert run_dir.name.startswith("torchrun-")
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert_one_set_of_hydra_files(run_dir, ranks=2)
    assert sum(builds(run_dir).values()) == 4  # one shared cache: each of its four parts built once


@pytest.mark.slow
def test_torchrun_two_nodes_with_node_local_caches(tmp_path):
    """Two one-process "nodes" on this machine (static rendezvous), a shared run directory and a
    data cache per node: each node builds its own tokenizer, and both are the same bytes."""
    port = free_port()
    caches = [tmp_path / f"node{node}-cache" for node in range(2)]
    nodes = [
        subprocess.Popen(
            [
                TORCHRUN,
                "--nnodes=2",
                "--nproc_per_node=1",
                f"--node_rank={node}",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                *tiny_training(cache, str(tmp_path / "run"), "trainer.num_nodes=2", "trainer.devices=1"),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node, cache in enumerate(caches)
    ]
    try:
        outputs = [node.communicate(timeout=300)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:  # the other node failed or hung: do not leave it waiting
                node.kill()
    for node, output in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, output[-3000:]
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
    assert_one_set_of_hydra_files(tmp_path / "run", ranks=2)
    assert builds(tmp_path / "run") == {"train.log": 4, "train_rank1.log": 4}  # every cache, once per node
    assert tokenizer_files(caches[0]) == tokenizer_files(caches[1]) != {}
