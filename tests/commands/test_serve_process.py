"""The real server process on 127.0.0.1: its startup line, a graceful SIGTERM/Ctrl-C, its drain
under load, a client that goes away, bodies over the limit, and the page driven by headless
Chromium (skipped, with the reason, where Chromium or Playwright is missing)."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import select
import shutil
import signal
import socket
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

from seq2seq.inference.backends import open_model
from seq2seq.inference.translator import Translator
from seq2seq.serving.app import WORKER_STOP_S
from seq2seq.serving.edge import SHUTTING_DOWN
from seq2seq.serving.service import Limits
from tests.helpers.in_process import python
from tests.helpers.tiny import BLEU, STEP

ROOT = Path(__file__).resolve().parents[2]
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
        assert (
            response.headers["Connection"] == "close"
        )  # sent while draining: a keep-alive client reconnects
        want = [best.text for best, *_ in translator.translate(texts)]
        assert [t["text"] for t in response.json()["translations"]] == want
        assert server.process.wait(timeout=60) == 0
        assert "Traceback" not in server.log.read_text()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/health")
    finally:
        stop(server)


HEAVY = {  # seconds of decoding for the tiny random model, which runs to max_len
    "text": [f"Sentence {i} is about the weather, the station and a cup of coffee." for i in range(32)],
    "beam": 8,
    "max_len": 50,
}


def metric(server: Server, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))


def test_sigterm_under_load_answers_each_request_200_or_json_503_in_time(checkpoint, tmp_path) -> None:
    """Exit code 0: a drain is the shutdown working as documented."""
    graceful, clients = 1.0, 8
    server = start_server(
        checkpoint, tmp_path / "server.log", "--batch-tokens", "64", "--graceful-timeout", str(graceful)
    )
    try:
        with ThreadPoolExecutor(max_workers=clients) as pool:
            url = f"{server.url}/translate"
            pending = [pool.submit(httpx.post, url, json=HEAVY, timeout=60) for _ in range(clients)]
            deadline = time.monotonic() + 30
            while in_flight(server) < clients:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            signalled = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            responses = [answer.result() for answer in pending]
            answered = time.monotonic()
        assert server.process.wait(timeout=60) == 0
        exited = time.monotonic()
    finally:
        stop(server)
    statuses = [response.status_code for response in responses]
    assert set(statuses) <= {200, 503} and 503 in statuses  # minutes of work: the bound cut it short
    for response in responses:
        assert response.headers["Connection"] == "close"  # a keep-alive client opens a new one
        if response.status_code == 503:
            assert response.json() == {"error": SHUTTING_DOWN} and response.headers["Retry-After"] == "1"
        else:
            assert len(response.json()["translations"]) == len(HEAVY["text"])
    assert answered - signalled < graceful + 3  # slack for a loaded machine
    assert exited - signalled < graceful + WORKER_STOP_S + 5
    assert "Traceback" not in server.log.read_text()


def test_a_client_that_goes_away_has_its_sentences_left_undecoded(checkpoint, tmp_path) -> None:
    server = start_server(checkpoint, tmp_path / "server.log", "--batch-tokens", "64")
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.url}/translate", json=HEAVY, timeout=0.5)  # then it closes the connection
        deadline = time.monotonic() + 30
        while metric(server, "seq2seq_cancelled_sentences_total") == 0:
            assert time.monotonic() < deadline, "the abandoned request was decoded in full"
            time.sleep(0.05)
        assert httpx.post(f"{server.url}/translate", json={"text": "Hi."}, timeout=60).status_code == 200
    finally:
        stop(server)


def refusal(sock: socket.socket) -> tuple[str, dict]:
    """The status line and JSON body of the answer on ``sock``, read until the server closes it."""
    sock.settimeout(30)
    data = b""
    with contextlib.suppress(ConnectionResetError):  # a reset after the answer: our bytes it never read
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    return head.split(b"\r\n")[0].decode(), json.loads(body)


def test_a_body_over_the_limit_is_refused_before_it_is_read(checkpoint, tmp_path) -> None:
    limit = Limits(max_input_chars=10).max_body_bytes
    server = start_server(checkpoint, tmp_path / "server.log", "--max-input-chars", "10")
    host, port = server.url.removeprefix("http://").split(":")
    request = "POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    try:
        with socket.create_connection((host, int(port))) as sock:  # declares 100 MB, sends 1 KB
            sock.sendall(f"{request}Content-Length: {100 * 2**20}\r\n\r\n".encode() + b"x" * 1024)
            assert refusal(sock) == (
                "HTTP/1.1 413 Request Entity Too Large",
                {"error": f"the body has {100 * 2**20} bytes; this server accepts at most {limit}"},
            )
        with socket.create_connection((host, int(port))) as sock:  # declares nothing, sends chunks
            sock.sendall(f"{request}Transfer-Encoding: chunked\r\n\r\n".encode())
            for _ in range(100 * limit // 1024):  # a body that never ends, until the server answers
                if select.select([sock], [], [], 0.002)[0]:
                    break
                sock.sendall(b"400\r\n" + b"x" * 1024 + b"\r\n")
            assert refusal(sock) == (
                "HTTP/1.1 413 Request Entity Too Large",
                {"error": f"the body is over {limit} bytes, the most this server accepts"},
            )
        assert httpx.post(f"{server.url}/translate", json={"text": "Hi."}, timeout=60).status_code == 200
    finally:
        stop(server)


def test_a_bad_checkpoint_is_one_line_and_exit_1(tmp_path) -> None:
    """In this process (no server starts: what it prints and its exit status are the test)."""
    result = python(str(ROOT / "serve.py"), "--ckpt", str(tmp_path / "missing.ckpt"))
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
    page_defaults = translator.decode_cfg_with(beam=4, nbest=3)
    best = next(iter(translator.translate([sentence], page_defaults)))
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


def test_the_page_continues_a_prefix_with_phrases_in_order_in_chromium(page_server, translator) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    sentence, prefix, phrases = "I like coffee.", "Me", ["mucho", "café"]
    page_defaults = translator.decode_cfg_with(beam=4, nbest=3)
    best = next(iter(translator.translate([sentence], page_defaults, [prefix], [phrases], True)))
    assert best[0].text.startswith(prefix) and best[0].text.index("mucho") < best[0].text.index("café")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(page_server.url)
            page.fill("#source", sentence)
            page.fill("#prefix", prefix)
            page.fill("#constraints", "\n".join(phrases) + "\n\n")  # blank lines are no phrase
            page.check("#in-order")
            page.click("#translate")
            page.wait_for_selector("#result:not([hidden])", timeout=60_000)
            assert page.text_content("#translation") == best[0].text
            assert page.locator("#nbest-list tbody tr").count() == len(best)
            assert page.is_hidden("#attention")  # /attention's search knows no constraints
        finally:
            browser.close()
