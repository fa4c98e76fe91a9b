"""Command line behind ``serve.py``: load, say what is served, run uvicorn.

The listening socket is bound before the address is printed, so ``--port 0`` (any free port)
prints the real port and a client that connects right after the line is printed waits for
the app instead of being refused. SIGTERM or Ctrl-C starts uvicorn's graceful shutdown: no new
connections; the requests in flight get ``--graceful-timeout`` seconds to be answered, and those
still waiting then are answered 503; the process exits 0 at most :data:`~seq2seq.serving.app.WORKER_STOP_S`
seconds later. A second Ctrl-C stops at once.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn

from seq2seq.command_line import (
    OneLineParser,
    UsageError,
    add_compute_arguments,
    add_model_arguments,
    run_command,
)
from seq2seq.formats.checkpoint import CheckpointError, ModelFacts
from seq2seq.formats.export_folder import ExportError
from seq2seq.inference.backends import EnsembleError, Opened, open_model
from seq2seq.inference.shortlist import add_shortlist_argument, check_shortlist_argument
from seq2seq.inference.translator import DEFAULT_BATCH_TOKENS
from seq2seq.serving.app import create_app
from seq2seq.serving.batcher import DynamicBatcher
from seq2seq.serving.service import DEFAULT_MAX_INPUT_CHARS, Limits, TranslationService

PROG = "serve.py"
GRACEFUL_TIMEOUT_S = 20  # with WORKER_STOP_S, the exit comes within 30 s of SIGTERM (Kubernetes' grace)
EXPECTED_ERRORS = (CheckpointError, ExportError, ValueError, OSError)  # OSError: e.g. the port is taken


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Serve a trained seq2seq checkpoint (or an export of one) over HTTP, with a web page.",
    )
    add_model_arguments(
        parser, "a CTranslate2 or transformers export (python -m seq2seq.export); no attention maps", True
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="default: 8000; 0 picks a free port")
    add_compute_arguments(
        parser,
        "compute dtype of a checkpoint, as translate.py's (default: auto, chosen from the hardware; int8: "
        "int8 weights, on a CPU)",
    )
    add_shortlist_argument(parser)
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=DEFAULT_BATCH_TOKENS,
        metavar="N",
        help=f"padded source tokens per model batch (default: {DEFAULT_BATCH_TOKENS})",
    )
    parser.add_argument(
        "--queue-size", type=int, default=256, metavar="N", help="requests waiting before 503 (default: 256)"
    )
    parser.add_argument(
        "--max-input-chars",
        type=int,
        default=DEFAULT_MAX_INPUT_CHARS,
        metavar="N",
        help=f"longest sentence accepted, in characters; longer get 413 (default: {DEFAULT_MAX_INPUT_CHARS})",
    )
    parser.add_argument(
        "--max-wait-ms",
        type=float,
        default=5.0,
        metavar="MS",
        help="how long a request may wait for others to share its model call (default: 5)",
    )
    parser.add_argument(
        "--graceful-timeout",
        type=float,
        default=GRACEFUL_TIMEOUT_S,
        metavar="S",
        help="at SIGTERM, how long the requests in flight get to be answered; those still waiting "
        f"then get 503 (default: {GRACEFUL_TIMEOUT_S})",
    )
    parser.add_argument("--access-log", action="store_true", help="log every request (off: see /metrics)")
    return parser


def _check(args: argparse.Namespace) -> None:
    for name in ("batch_tokens", "queue_size", "max_input_chars"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")
    check_shortlist_argument(args.shortlist, args.ckpt)
    for name in ("max_wait_ms", "graceful_timeout"):
        if not 0 <= getattr(args, name) < math.inf:  # NaN too
            raise UsageError(
                f"--{name.replace('_', '-')} must be a finite number >= 0, got {getattr(args, name)}"
            )


def describe_model(facts: ModelFacts) -> str:
    """One line about the model: size, shape, training step and validation BLEU."""
    cfg = facts.model_config
    step = "unknown" if facts.global_step is None else facts.global_step
    bleu = "unknown" if facts.best_bleu is None else f"{facts.best_bleu:.2f}"
    return (
        f"model {facts.name}: {facts.parameters / 1e6:.2f} M parameters (d_model {cfg.d_model}, "
        f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, {cfg.n_heads} heads), "
        f"step {step}, val BLEU {bleu}"
    )


def load(args: argparse.Namespace) -> Opened:
    """The checkpoint (PyTorch, in ``--dtype``, with its ``--shortlist``) or the export that
    ``--ckpt``/``--model`` names."""
    try:
        return open_model(
            args.ckpt, args.model, args.device, args.batch_tokens, args.dtype, shortlist=args.shortlist
        )
    except EnsembleError as err:
        raise UsageError(str(err)) from err


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (IPv4 or IPv6, as the host name resolves)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


class DrainingServer(uvicorn.Server):
    """uvicorn's server, which sets ``draining`` when its graceful shutdown begins: the app then
    closes each connection it answers (uvicorn's h11 closes them without saying so)."""

    def __init__(self, config: uvicorn.Config, draining: threading.Event) -> None:
        super().__init__(config)
        self.draining = draining

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.draining.set()
        super().handle_exit(sig, frame)


@contextlib.contextmanager
def _exit_zero_after_graceful_shutdown() -> Iterator[None]:
    """uvicorn re-raises the SIGINT/SIGTERM it handled once it has shut down, so the process dies
    of it; a server that drained cleanly should exit 0, so the re-raised signal is ignored here."""
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(args: argparse.Namespace) -> int:
    _check(args)
    translator, facts, _ = load(args)
    batcher = DynamicBatcher(translator, args.queue_size, args.max_wait_ms / 1000)
    service = TranslationService(facts, batcher, Limits(args.max_input_chars, args.queue_size))
    sock = listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    print(f"{describe_model(facts)}, {translator.compute}", flush=True)
    print(f"serving on {url} (page {url}/, API docs {url}/docs, metrics {url}/metrics)", flush=True)
    draining = threading.Event()
    config = uvicorn.Config(
        create_app(service, draining.is_set),
        log_level="info",
        access_log=args.access_log,
        timeout_graceful_shutdown=args.graceful_timeout,
    )
    with _exit_zero_after_graceful_shutdown():
        DrainingServer(config, draining).run(sockets=[sock])
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM or Ctrl-C; expected failures print one line and return non-zero."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(name)s: %(message)s")
    return run_command(PROG, lambda: run(build_parser().parse_args(argv)), EXPECTED_ERRORS)
