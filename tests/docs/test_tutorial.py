"""docs/tutorial.md runs as written: every command of its shell blocks, in order, in a scratch
directory whose ``data/spa-eng/spa.txt.gz`` is the 300-pair fixture.

Two changes make a minute of the hour the page takes: a command that reads the corpus gets
``experiment=tiny`` (two epochs of the tiny model, small held-out splits and vocabulary) and a
cache directory of its own. Training also logs a progress line every 5 steps and decides on
dropout by its budget, so that its log holds every kind of line the page shows. The servers
(TensorBoard, ``serve.py``) run in the background on free ports, which the commands that query
them use instead of the default ones.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.compose import ROOT
from tests.helpers.doc_lines import shell_lines
from tests.helpers.tiny import CORPUS

PAGE = ROOT / "docs" / "tutorial.md"
SERVE_PORT = "8000"  # serve.py's default, which the page's curl commands use
READY = {"tensorboard": "http://localhost:{port}/", "serve.py": "http://127.0.0.1:{port}/health"}


def page_commands() -> list[str]:
    """The shell lines of the page's fenced blocks, in order."""
    return [line for _, line, fenced, _ in shell_lines(PAGE.read_text()) if fenced]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def shown_log_kinds() -> list[str]:
    """What each log line shown under "2. Train" is (``step``, ``validation at step``...): its
    words up to the first figure or colon."""
    section = PAGE.read_text().split("## 2. Train", 1)[1].split("\n## ", 1)[0]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    return [re.match(r"[a-z ]+", line).group().strip() for line in block.splitlines()]


def server_of(line: str) -> str | None:
    """Which server ``line`` starts, if it starts one."""
    return next((server for server in READY if re.search(rf"(^|[\s/]){re.escape(server)}\b", line)), None)


def adapted(line: str, cache: Path, ports: dict[str, int]) -> str:
    """``line`` as the test runs it (see the module's docstring)."""
    server = server_of(line)
    line = re.sub(r"\b(train|translate|serve)\.py\b", lambda m: str(ROOT / m.group(0)), line)
    if "train.py" in line or "seq2seq.data.inspect" in line:
        line += f" experiment=tiny data.cache_dir={cache}"
    if "train.py" in line:
        line += " callbacks.progress_every_n_steps=5 optim.dropout_min_epochs=10"
    if server:
        line += f" --port {ports[server]}"
    return line.replace(f"127.0.0.1:{SERVE_PORT}", f"127.0.0.1:{ports['serve.py']}")


def wait_until_ready(process: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{url}: the server stopped:\n{log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(1)
    pytest.fail(f"{url} did not answer in 180 s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_every_command_of_the_tutorial_runs(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("the page queries the server with curl, which this machine lacks")
    (tmp_path / "data" / "spa-eng").mkdir(parents=True)
    (tmp_path / "data" / "spa-eng" / "spa.txt.gz").write_bytes(gzip.compress(CORPUS.read_bytes()))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ports = {server: free_port() for server in READY}
    servers: list[subprocess.Popen] = []
    outputs: dict[str, str] = {}
    try:
        for line in page_commands():
            command = adapted(line, tmp_path / "cache", ports)
            if server := server_of(line):
                log = tmp_path / f"{server}.log"
                servers.append(
                    subprocess.Popen(
                        ["bash", "-c", command],
                        cwd=tmp_path,
                        env=env,
                        stdout=log.open("w"),
                        stderr=subprocess.STDOUT,
                    )
                )
                wait_until_ready(servers[-1], READY[server].format(port=ports[server]), log)
                continue
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", command],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            outputs[line] = done.stdout
        tags = urllib.request.urlopen(
            f"http://localhost:{ports['tensorboard']}/data/plugin/scalars/tags"
        ).read()
        assert {"train/loss", "val/bleu", "val/chrf"} <= set(next(iter(json.loads(tags).values())))
    finally:
        for process in servers:
            process.terminate()
            process.wait(timeout=60)
    messages = [
        line.split("] - ", 1)[-1] for line in (tmp_path / "runs/es-en/train.log").read_text().splitlines()
    ]
    assert not [kind for kind in shown_log_kinds() if not any(m.startswith(kind) for m in messages)]
    answer = next(json.loads(out) for line, out in outputs.items() if line.startswith("curl"))
    assert len(answer["translations"]) == 2
    assert len((tmp_path / "mine.en").read_text().splitlines()) == 2
    evaluation = next(out for line, out in outputs.items() if "--eval test" in line)
    assert evaluation.startswith("BLEU = ") and "\ncompute = " in evaluation


def test_the_tutorial_shows_every_stage() -> None:
    """The page keeps a command for each stage it promises (so the test above keeps testing them)."""
    commands = " ".join(page_commands())
    for stage in ("seq2seq.data.inspect", "train.py", "tensorboard", "--eval test", "seq2seq.export",
                  "--to ctranslate2", "translate.py --model", "serve.py", "curl"):  # fmt: skip
        assert stage in commands, stage
