"""The real server process on 127.0.0.1: its startup line, a graceful SIGTERM/Ctrl-C, and the page
driven by headless Chromium (skipped, with the reason, where Chromium or Playwright is missing)."""

from __future__ import annotations

import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tiny import BLEU, STEP

from seq2seq.inference.backends import open_model
from seq2seq.inference.translator import Translator

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class Server:
    process: subprocess.Popen
    url: str
    banner: str  # what it printed before serving
    log: Path  # its stderr


def start_server(checkpoint: Path, log: Path, *options: str) -> Server:
    """``serve.py`` on a free port of 127.0.0.1; returns once it has printed its address."""
    command = [
        sys.executable,
        str(ROOT / "serve.py"),
        "--ckpt",
        str(checkpoint),
        "--port",
        "0",
        "--device",
        "cpu",
        "--dtype",
        "float32",  # as translator() decodes, whatever auto picks on this machine
    ]
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [*command, *options], stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT
        )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    banner = []
    while not banner or not banner[-1].startswith("serving on "):
        try:
            banner.append(lines.get(timeout=120))
        except queue.Empty:
            process.kill()
            raise AssertionError(f"no address printed; stderr: {log.read_text()}") from None
    url = re.search(r"http://127\.0\.0\.1:\d+", banner[-1]).group(0)
    return Server(process, url, "".join(banner), log)


def stop(server: Server) -> None:
    if server.process.poll() is None:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="module")
def translator(checkpoint: Path) -> Translator:
    return open_model(checkpoint, device="cpu", dtype="float32").translator  # as the server decodes


def in_flight(server: Server) -> int:
    metrics = httpx.get(f"{server.url}/metrics").text
    return int(re.search(r'seq2seq_requests_in_flight\{endpoint="/translate"\} (\d+)', metrics).group(1))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_lets_the_request_in_flight_finish_then_exits_zero(
    checkpoint, translator, tmp_path, sig
) -> None:
    texts = ["How are you?", "I like coffee."]
    server = start_server(checkpoint, tmp_path / "server.log", "--max-wait-ms", "5000")  # requests linger
    try:
        assert "0.05 M parameters" in server.banner and f"step {STEP}, val BLEU {BLEU}" in server.banner
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(httpx.post, f"{server.url}/translate", json={"text": texts}, timeout=60)
            deadline = time.monotonic() + 30
            while in_flight(server) == 0:
                assert time.monotonic() < deadline and not pending.done()
                time.sleep(0.02)
            assert not pending.done()
            server.process.send_signal(sig)
            response = pending.result()
        assert response.status_code == 200
        want = [best.text for best, *_ in translator.translate(texts)]
        assert [t["text"] for t in response.json()["translations"]] == want
        assert server.process.wait(timeout=60) == 0
        assert "Traceback" not in server.log.read_text()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/health")
    finally:
        stop(server)


def test_a_bad_checkpoint_is_one_line_and_exit_1(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "serve.py"), "--ckpt", str(tmp_path / "missing.ckpt")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"serve.py: error: checkpoint not found: {tmp_path}/missing.ckpt"
    ]


@pytest.fixture(scope="module")
def page_server(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(checkpoint, tmp_path_factory.mktemp("page") / "server.log")
    yield server
    stop(server)


PAINTED_COLOURS = """() => {
  const canvas = document.getElementById("heatmap");
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  const colours = new Set();
  for (let i = 0; i < pixels.length; i += 4) if (pixels[i + 3]) colours.add(pixels.slice(i, i + 3).join());
  return colours.size;
}"""


def test_the_page_translates_and_draws_the_attention_in_chromium(page_server, translator, tmp_path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    sentence = "I like coffee."
    best = next(iter(translator.translate([sentence], translator.settings(beam=4, nbest=3))))  # page defaults
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(page_server.url)
            page.fill("#source", sentence)
            page.click("#translate")
            page.wait_for_selector("#attention:not([hidden])", timeout=60_000)
            assert page.text_content("#translation") == best[0].text
            assert page.locator("#nbest-list tbody tr").count() == len(best) == 3
            assert page.evaluate(PAINTED_COLOURS) > 10  # cells in many shades, labels, the colour bar
            assert "layer 2 · average of heads" in page.inner_text("#heatmap-title")
            page.select_option("#kind", value="encoder_self")
            page.select_option("#head", index=2)  # options: average, 1, 2, ...
            assert page.inner_text("#heatmap-title") == "Encoder self-attention · layer 2 · head 2"
            assert page.evaluate(PAINTED_COLOURS) > 10
            page.select_option("#kind", value="cross")
            page.select_option("#head", value="mean")
            page.screenshot(path=tmp_path / "page.png", full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "page.png").stat().st_size > 10_000
