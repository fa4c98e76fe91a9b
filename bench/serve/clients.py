"""Serving benchmark: 32 concurrent HTTP clients against ``serve.py`` vs one-at-a-time Translator calls.

Both sides translate the same real sentences (spread over all lengths of the corpus) with the
checkpoint's settings. First the Translator, in this process, translates each sentence with its
own ``translate`` call; its outputs are the reference. Then ``serve.py`` starts on 127.0.0.1 (a free
port), is warmed up, and ``--clients`` clients each POST one sentence at a time to /translate for
``--seconds``. Reported: requests/s, p50/p99 latency, failed requests (an error status or
exception), lost ones (sent, never answered), wrong ones (not the reference translation), and the
server's resident memory after the warm-up and after the run. Without ``--ckpt`` a ``small`` model
with random weights is used, its output cut at source length + 1 (about a trained model's lengths).

    python -m bench.serve.clients [--ckpt best.ckpt] [--seconds 60] [--clients 32]  # ~2.5 min
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import torch

from bench.lib.measure import (
    CORPUS,
    ROOT,
    bench_parser,
    ratio_line,
    sample_corpus_pairs,
    target_for,
    targets,
)
from seq2seq.config import DataConfig, DecodeConfig, ModelConfig
from seq2seq.data.tokenizers.tokenizer import TranslationTokenizer
from seq2seq.formats.checkpoint import seq2seq_entry
from seq2seq.inference.backends import open_model
from seq2seq.model import Transformer

TARGETS = {"serve_throughput_vs_sequential": 4}  # the server at least this many times one-at-a-time calls


def random_checkpoint(directory: Path) -> Path:
    """The ``small`` model with random weights and a tokenizer trained on the corpus."""
    with gzip.open(CORPUS, "rt", encoding="utf-8") as handle:
        pairs = [line.rstrip("\n").split("\t")[:2] for line in handle]
    tokenizer = TranslationTokenizer.train(
        (en for en, _ in pairs), (es for _, es in pairs), 8000, shared=True
    )
    cfg = ModelConfig(d_model=256, n_heads=4, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024)
    torch.manual_seed(0)
    model = Transformer(cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    decode = DecodeConfig(max_len_a=1.0, max_len_b=1)
    meta = seq2seq_entry(cfg, decode, DataConfig(), tokenizer, "model.")
    state = {f"model.{name}": tensor for name, tensor in model.state_dict().items()}
    path = directory / "random-small.ckpt"
    torch.save({"state_dict": state, "seq2seq": meta}, path)
    return path


def sequential(ckpt: Path, sentences: list[str]) -> tuple[float, dict[str, str]]:
    """Sentences per second with one ``translate`` call per sentence, and the outputs."""
    translator = open_model(ckpt, device="cpu").translator
    outputs = {}
    start = time.perf_counter()
    for sentence in sentences:
        outputs[sentence] = next(iter(translator.translate([sentence])))[0].text
    return len(sentences) / (time.perf_counter() - start), outputs


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)  # of the answered requests
    sent: int = 0
    exceptions: int = 0  # no answer: connection error or timeout
    errors: int = 0  # answered with a status other than 200
    wrong: int = 0  # answered 200 with another translation than the reference


async def clients(url: str, reference: dict[str, str], n_clients: int, seconds: float) -> Load:
    """``n_clients`` loops, each sending the next sentence as soon as its previous one is answered."""
    load, sentences, counter = Load(), list(reference), iter(range(10**12))
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=n_clients, max_keepalive_connections=n_clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:

        async def one_client() -> None:
            while time.perf_counter() < deadline:
                sentence = sentences[next(counter) % len(sentences)]
                load.sent += 1
                start = time.perf_counter()
                try:
                    response = await client.post("/translate", json={"text": sentence})
                except httpx.HTTPError:
                    load.exceptions += 1
                    continue
                load.latencies.append(time.perf_counter() - start)
                if response.status_code != 200:
                    load.errors += 1
                elif response.json()["translations"][0]["text"] != reference[sentence]:
                    load.wrong += 1

        await asyncio.gather(*(one_client() for _ in range(n_clients)))
    return load


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024


def start_server(ckpt: Path) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, str(ROOT / "serve.py"), "--ckpt", str(ckpt), "--port", "0", "--device", "cpu"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in server.stdout:
        if found := re.search(r"serving on (http://\S+)", line):
            return server, found.group(1)
    raise SystemExit("serve.py exited before serving")


def mean_batch(url: str) -> float:
    metrics = httpx.get(f"{url}/metrics").text
    total = float(re.search(r"^seq2seq_batch_sentences_sum (\S+)", metrics, re.M).group(1))
    count = float(re.search(r"^seq2seq_batch_sentences_count (\S+)", metrics, re.M).group(1))
    return total / max(count, 1)


def main() -> None:
    parser = bench_parser(__doc__, TARGETS)
    parser.add_argument("--ckpt", type=Path, help="a trained checkpoint (default: random small weights)")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the measured load (60)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (32)")
    parser.add_argument("--sentences", type=int, default=500, help="distinct corpus sentences (500)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.ckpt or random_checkpoint(Path(tmp))
        sentences = sample_corpus_pairs(args.sentences)[0]
        per_second, reference = sequential(ckpt, sentences)
        print(
            f"one Translator call per sentence: {per_second:.1f} sentences/s over {len(sentences)} sentences",
            flush=True,
        )
        server, url = start_server(ckpt)
        try:
            asyncio.run(clients(url, reference, args.clients, min(10.0, args.seconds)))  # warm-up
            before = rss_mib(server.pid)
            load = asyncio.run(clients(url, reference, args.clients, args.seconds))
            after = rss_mib(server.pid)
            batch = mean_batch(url)
        finally:
            server.terminate()
            server.wait()
    report(load, args, per_second, before, after, batch)


def report(
    load: Load, args: argparse.Namespace, per_second: float, before: float, after: float, batch: float
):
    latencies = sorted(load.latencies)
    throughput = (len(latencies) - load.errors) / args.seconds
    lost = load.sent - len(latencies) - load.exceptions  # neither answered nor failed: never accounted for
    print(
        f"server, {args.clients} clients for {args.seconds:.0f} s: {len(latencies)} answers, "
        f"{throughput:.1f} requests/s, p50 {1e3 * latencies[len(latencies) // 2]:.0f} ms, "
        f"p99 {1e3 * latencies[int(len(latencies) * 0.99)]:.0f} ms; "
        f"failed {load.exceptions + load.errors}, lost {lost}, wrong {load.wrong}; "
        f"{batch:.1f} sentences per model call"
    )
    print(
        f"server memory (RSS): {before:.1f} MiB after warm-up, "
        f"{after:.1f} MiB after the run ({after - before:+.1f} MiB)"
    )
    name = "serve_throughput_vs_sequential"
    print(ratio_line(name, throughput / per_second, target_for(name, targets(args))))


if __name__ == "__main__":
    main()
