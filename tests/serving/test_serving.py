"""The HTTP API through FastAPI's TestClient, on a real tiny checkpoint: results equal the Translator
whatever shares the batch, every bad input gets a one-line error, and a full queue answers 503."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from seq2seq.data.tokenizers.tokenizer import BOS_ID, EOS_ID
from seq2seq.formats.checkpoint import load_model
from seq2seq.inference.backends import open_model
from seq2seq.inference.translator import DEFAULT_BATCH_TOKENS, Translator
from seq2seq.serving import cli
from seq2seq.serving.app import create_app
from seq2seq.serving.batcher import DynamicBatcher
from seq2seq.serving.service import Limits, TranslationService
from tests.helpers.tiny import BLEU, STEP

SENTENCES = ["How are you?", "I like coffee.", "Tom is here.", "Where is the station, please?", "Hi.", "   "]


@contextmanager
def serve(checkpoint: Path, queue_size: int = 64, max_wait_s: float = 0.005) -> Iterator[TestClient]:
    translator, facts, _ = open_model(
        checkpoint, device="cpu", batch_tokens=DEFAULT_BATCH_TOKENS, dtype="float32"
    )
    batcher = DynamicBatcher(translator, queue_size, max_wait_s)
    service = TranslationService(
        facts,
        batcher,
        Limits(max_input_chars=200, queue_size=queue_size),
    )
    with TestClient(create_app(service)) as client:
        yield client


@pytest.fixture(scope="module")
def client(checkpoint: Path) -> Iterator[TestClient]:
    with serve(checkpoint) as client:
        yield client


def expected(translator: Translator, texts: list[str], beam: int | None, nbest: int | None, max_len=None):
    """What the server must answer: Translator.translate of these texts alone, as JSON."""
    decode_cfg = translator.decode_cfg_with(beam=beam or translator.decode_cfg.beam_size, nbest=nbest)
    if max_len is not None:
        decode_cfg = replace(decode_cfg, max_len_a=0.0, max_len_b=max_len)
    return [[(t.text, t.score) for t in nbest] for nbest in translator.translate(texts, decode_cfg)]


def answered(response) -> list[list[tuple[str, float]]]:
    assert response.status_code == 200, response.text
    results = response.json()["translations"]
    for result in results:
        assert (result["text"], result["score"]) == (result["nbest"][0]["text"], result["nbest"][0]["score"])
    return [[(h["text"], h["score"]) for h in result["nbest"]] for result in results]


def assert_same(got: list, want: list) -> None:
    assert [[text for text, _ in n] for n in got] == [[text for text, _ in n] for n in want]
    assert [s for n in got for _, s in n] == pytest.approx([s for n in want for _, s in n], abs=1e-4)


REQUESTS = [  # (texts, beam, nbest, max_len): a mix of sizes and settings
    (["How are you?"], None, None, None),
    (SENTENCES, 3, 3, None),
    (["I like coffee.", "Hi."], 1, None, None),
    (["Where is the station, please?"], 2, 2, 3),
    (SENTENCES[::-1], None, 1, None),
]


@pytest.mark.parametrize(("texts", "beam", "nbest", "max_len"), REQUESTS)
def test_translate_equals_the_translator(client, translator, texts, beam, nbest, max_len) -> None:
    body = {"text": texts, "beam": beam, "nbest": nbest, "max_len": max_len}
    response = client.post("/translate", json={k: v for k, v in body.items() if v is not None})
    got = answered(response)
    assert_same(got, expected(translator, texts, beam, nbest, max_len))
    assert len(got[0]) == (nbest or 1)


def test_a_single_string_gets_a_list_of_one(client, translator) -> None:
    got = answered(client.post("/translate", json={"text": "I like coffee."}))
    assert_same(got, expected(translator, ["I like coffee."], None, None))


def batch_stats(client: TestClient) -> tuple[int, int]:
    """(model calls, requests they served) from /metrics."""
    values = dict(line.rsplit(" ", 1) for line in client.get("/metrics").text.splitlines() if line[0] != "#")
    return int(values["seq2seq_batch_requests_count"]), int(float(values["seq2seq_batch_requests_sum"]))


def test_32_concurrent_requests_share_model_calls_and_equal_the_translator(checkpoint, translator) -> None:
    jobs = [REQUESTS[i % len(REQUESTS)] for i in range(32)]
    wanted = [expected(translator, texts, beam, nbest, max_len) for texts, beam, nbest, max_len in jobs]
    with serve(checkpoint, max_wait_s=0.05) as client:
        calls_before, served_before = batch_stats(client)

        def send(job):
            texts, beam, nbest, max_len = job
            body = {"text": texts, "beam": beam, "nbest": nbest, "max_len": max_len}
            return client.post("/translate", json={k: v for k, v in body.items() if v is not None})

        batcher = client.app.state.service.batcher
        release = threading.Event()
        wait_until(batcher.call(release.wait).running)  # the worker is busy until all 32 wait
        with ThreadPoolExecutor(max_workers=32) as pool:
            pending = pool.map(send, jobs)
            wait_until(lambda: batcher.depth == 32)  # however fast or slow the machine
            release.set()
            responses = list(pending)
        for response, want in zip(responses, wanted, strict=True):
            assert_same(answered(response), want)
        calls, served = batch_stats(client)
    assert served - served_before == 32
    assert calls - calls_before < 32  # some model calls served several requests


BAD_REQUESTS = [  # (raw body, status, words the one-line error must contain)
    (b'{"text": ', 422, "malformed JSON"),
    (b"not json at all", 422, "malformed JSON"),
    (b'{"texts": "Hi."}', 422, "texts"),
    (b'{"text": 5}', 422, "string"),
    (b'{"text": []}', 422, "1 to 64"),
    (json.dumps({"text": ["Hi."] * 65}).encode(), 422, "1 to 64"),
    (b'{"text": "Hi.", "beam": 0}', 422, "beam"),
    (b'{"text": "Hi.", "beam": 17}', 422, "beam"),
    (b'{"text": "Hi.", "beam": "3"}', 422, "beam"),
    (b'{"text": "Hi.", "beam": 2, "nbest": 3}', 422, "nbest (3) must be <= beam (2)"),
    (b'{"text": "Hi.", "nbest": 0}', 422, "nbest"),
    (b'{"text": "Hi.", "max_len": 0}', 422, "max_len"),
    (b'{"text": "Hi.", "max_len": 1000}', 422, "max_positions"),
    (json.dumps({"text": ["Hi.", "x" * 201]}).encode(), 413, "text 1 has 201 characters"),
]


@pytest.mark.parametrize(("body", "status", "words"), BAD_REQUESTS)
def test_bad_input_gets_a_one_line_error_and_the_server_keeps_serving(client, body, status, words) -> None:
    response = client.post("/translate", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status
    assert list(response.json()) == ["error"]
    error = response.json()["error"]
    assert words in error and "\n" not in error and "Traceback" not in response.text
    assert client.post("/translate", json={"text": "Hi."}).status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [("/attention", {"text": "   "}, "blank"), ("/attention", {"text": "x" * 201}, "201 characters")],
)
def test_bad_attention_input(client, path, body, words) -> None:
    response = client.post(path, json=body)
    assert response.status_code in (413, 422) and words in response.json()["error"]


def test_unknown_paths_and_methods_answer_in_json(client) -> None:
    assert client.get("/nowhere").json() == {"error": "Not Found"}
    assert client.get("/translate").status_code == 405 and "error" in client.get("/translate").json()


def test_a_failing_model_call_is_a_one_line_500_and_the_worker_survives(client, monkeypatch) -> None:
    service = client.app.state.service
    monkeypatch.setattr(
        service.translator, "search", lambda *_: (_ for _ in ()).throw(RuntimeError("bad\nstate"))
    )
    response = client.post("/translate", json={"text": "Hi there."})
    assert response.status_code == 500 and response.json() == {
        "error": "internal error; the server log has the details"
    }
    monkeypatch.undo()
    assert client.post("/translate", json={"text": "Hi there."}).status_code == 200


def test_a_full_queue_answers_503_with_retry_after(checkpoint) -> None:
    with serve(checkpoint, queue_size=1) as client:
        batcher = client.app.state.service.batcher
        release = threading.Event()
        blocker = batcher.call(release.wait)  # the worker is busy until released
        wait_until(blocker.running)
        with ThreadPoolExecutor(max_workers=1) as pool:
            queued = pool.submit(client.post, "/translate", json={"text": "Hi."})
            wait_until(lambda: batcher.depth == 1)  # the one queue slot is taken
            refused = client.post("/translate", json={"text": "I like coffee."})
            release.set()
            assert queued.result().status_code == 200
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        assert "queue is full" in refused.json()["error"]
        assert "connection" not in refused.headers  # a busy server keeps the connection for the retry
        assert client.post("/translate", json={"text": "I like coffee."}).status_code == 200
        assert (
            'seq2seq_request_errors_total{endpoint="/translate",status="503"} 1'
            in client.get("/metrics").text
        )


def test_a_server_that_is_shutting_down_closes_the_connection_with_its_503(checkpoint) -> None:
    """A keep-alive client told nothing would send its retry down a connection the server drops."""
    with serve(checkpoint) as client:
        client.app.state.service.batcher.close()
        refused = client.post("/translate", json={"text": "Hi."})
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
    assert refused.headers["Connection"] == "close"
    assert refused.json() == {"error": "server busy: the server is shutting down; retry later"}


def test_a_cancelled_request_is_dropped_from_the_batches_not_yet_decoded(checkpoint, translator) -> None:
    small = open_model(checkpoint, device="cpu", batch_tokens=24, dtype="float32").translator
    texts = [f"{sentence} {i}" for i, sentence in enumerate(SENTENCES[:5] * 4)]  # several batches
    decode_cfg = small.decode_cfg_with(beam=1)
    batcher = DynamicBatcher(small, queue_size=4, max_wait_s=0.0)
    calls: list[list[str]] = []
    translate = small.translate

    def first_batch_then_cancel(
        batch: list[str], decode_cfg, prefixes=None, constraints=None, in_order=False
    ):
        calls.append(batch)
        abandoned.cancel()  # as the event loop does when the client goes away
        return translate(batch, decode_cfg, prefixes, constraints, in_order)

    small.translate = first_batch_then_cancel
    release, stuck = threading.Event(), threading.Event()
    batcher.start()
    try:
        wait_until(batcher.call(release.wait).running)
        abandoned = batcher.translate(texts, decode_cfg)
        beam_2 = small.decode_cfg_with(beam=2)
        kept = batcher.translate(["I like coffee."], beam_2)  # a group of its own
        release.set()
        [got], [want] = kept.result(timeout=60), translator.translate(["I like coffee."], beam_2)
        assert [t.text for t in got] == [t.text for t in want]
        assert abandoned.cancelled() and len(calls) == 2  # one batch of each group
        skipped = len(texts) - len(calls[0])
        assert skipped > 0 and f"seq2seq_cancelled_sentences_total {skipped}" in batcher.metrics.render(0)
        wait_until(batcher.call(stuck.wait).running)  # a model call that outlasts the shutdown
        started = time.monotonic()
        assert not batcher.close(timeout=0.2)  # the exit does not wait for it
        assert time.monotonic() - started < 5
    finally:
        release.set()
        stuck.set()


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_attention_returns_every_map_of_the_best_translation(client, translator) -> None:
    response = client.post("/attention", json={"text": "I like coffee.", "beam": 2})
    data = response.json()
    best = expected(translator, ["I like coffee."], 2, 1)[0][0]
    assert (data["translation"], data["score"]) == (best[0], pytest.approx(best[1], abs=1e-4))
    source = translator.encode(["I like coffee."])[0]
    output = translator.search([source], translator.decode_cfg_with(beam=2, nbest=1))[0][0].tokens
    with torch.inference_mode():
        maps = translator.model.attention_maps(torch.tensor([source]), torch.tensor([[BOS_ID, *output]]))
    assert len(data["source_tokens"]) == len(source) and data["source_tokens"][-1] == "</s>"
    assert data["target_tokens"][0] == "<s>" and len(data["output_tokens"]) == len(output) + 1
    assert data["output_tokens"][-1] == "</s>" and source[-1] == EOS_ID
    for key, model_key in [("encoder_self", "encoder"), ("decoder_self", "decoder_self"), ("cross", "cross")]:
        want = torch.stack([layer[0] for layer in maps[model_key]])  # (L, H, Tq, Tk)
        torch.testing.assert_close(torch.tensor(data[key]), want, atol=1e-4, rtol=0)
    decoder = torch.tensor(data["decoder_self"])
    assert torch.all(decoder.triu(diagonal=1) == 0)  # causal: nothing attends to later tokens


def test_info_health_and_metrics(client, checkpoint, tiny_model_cfg) -> None:
    info = client.get("/info").json()
    assert (info["checkpoint"], info["step"], info["val_bleu"]) == (checkpoint.name, STEP, BLEU)
    assert info["engine"] == "PyTorch float32"
    assert info["parameters"] == sum(p.numel() for p in load_model(checkpoint).model.parameters())
    assert info["model"]["n_heads"] == tiny_model_cfg.n_heads and info["tgt_vocab_size"] == 300
    assert client.get("/health").json() == {"status": "ok", "queue_depth": 0}
    client.post("/translate", json={"text": "Hi.", "beam": 99})
    text = client.get("/metrics").text
    for name in (
        "seq2seq_requests_total",
        "seq2seq_request_duration_seconds_bucket",
        "seq2seq_queue_depth 0",
    ):
        assert name in text
    assert 'seq2seq_request_errors_total{endpoint="/translate",status="422"}' in text
    assert client.get("/").headers["content-type"].startswith("text/html")
    assert "/translate" in client.get("/openapi.json").json()["paths"]


def test_in_flight_gauges_exist_before_the_first_request(checkpoint) -> None:
    with serve(checkpoint) as fresh:
        text = fresh.get("/metrics").text
    for endpoint in ("/translate", "/attention"):
        assert f'seq2seq_requests_in_flight{{endpoint="{endpoint}"}} 0' in text


def test_the_startup_line_says_the_size_shape_step_and_bleu(checkpoint: Path) -> None:
    translator, facts, _ = cli.load(
        cli.build_parser().parse_args(["--ckpt", str(checkpoint), "--device", "cpu", "--dtype", "float32"])
    )
    assert f"{cli.describe_model(facts)}, {translator.compute}" == (
        f"model {checkpoint.name}: 0.05 M parameters (d_model 32, 2+2 layers, 2 heads), step {STEP}, "
        f"val BLEU {BLEU:.2f}, PyTorch float32"
    )


def test_the_server_picks_its_compute_dtype_as_translate_py_does() -> None:
    assert cli.build_parser().parse_args(["--ckpt", "x.ckpt"]).dtype == "auto"


def test_ctrl_c_while_loading_exits_130(checkpoint: Path, monkeypatch, capsys) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "open_model", interrupted)
    assert cli.main(["--ckpt", str(checkpoint)]) == 130
    assert capsys.readouterr().err == ""
