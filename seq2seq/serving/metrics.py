"""Server metrics in the Prometheus text format (version 0.0.4), written by hand: a few counters,
gauges and histograms need no client library.

The event loop records requests and the batcher's worker thread records model calls, so every
update and the rendering take one lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)  # seconds
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Histogram:
    """Cumulative bucket counts, their sum and count, as Prometheus expects them."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str = "") -> list[str]:
        """Sample lines; ``labels`` is 'key="value",' text put before ``le``."""
        bucket_lines = [
            f'{name}_bucket{{{labels}le="{bound:g}"}} {count}'
            for bound, count in zip(self.buckets, self.counts, strict=True)
        ]
        braces = f"{{{labels.rstrip(',')}}}" if labels else ""
        return [
            *bucket_lines,
            f'{name}_bucket{{{labels}le="+Inf"}} {self.count}',
            f"{name}_sum{braces} {self.sum:.6f}",
            f"{name}_count{braces} {self.count}",
        ]


def _header(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


class ServingMetrics:
    """Requests (by endpoint and status), their latency, requests in flight, batch sizes and the
    sentences of cancelled requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, int]] = Counter()
        self._in_flight: Counter[str] = Counter()
        self._latency: dict[str, Histogram] = {}
        self._batch_requests = Histogram(BATCH_BUCKETS)
        self._batch_sentences = Histogram(BATCH_BUCKETS)
        self._cancelled = 0

    def expect(self, endpoints: Iterable[str]) -> None:
        """Show these endpoints' in-flight gauges at 0 before their first request, so a scraper
        never sees the series appear only once traffic starts."""
        with self._lock:
            for endpoint in endpoints:
                self._in_flight.setdefault(endpoint, 0)

    def request_started(self, endpoint: str) -> None:
        with self._lock:
            self._in_flight[endpoint] += 1

    def request_finished(self, endpoint: str, status: int, seconds: float) -> None:
        with self._lock:
            self._in_flight[endpoint] -= 1
            self._requests[endpoint, status] += 1
            self._latency.setdefault(endpoint, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def batch(self, requests: int, sentences: int) -> None:
        """One pass over requests that share decoding settings: ``requests`` answered, ``sentences``
        decoded (in as many model calls as their token budget needs)."""
        with self._lock:
            self._batch_requests.observe(requests)
            self._batch_sentences.observe(sentences)

    def cancelled(self, sentences: int) -> None:
        """Sentences left undecoded because their request was cancelled."""
        with self._lock:
            self._cancelled += sentences

    def render(self, queue_depth: int) -> str:
        """The exposition text; ``queue_depth`` is read by the caller at scrape time."""
        with self._lock:
            requests = sorted(self._requests.items())
            lines = _header("seq2seq_requests_total", "counter", "HTTP requests by endpoint and status.")
            lines += [f'seq2seq_requests_total{{endpoint="{e}",status="{s}"}} {n}' for (e, s), n in requests]
            lines += _header(
                "seq2seq_request_errors_total", "counter", "Requests answered with status >= 400."
            )
            lines += [
                f'seq2seq_request_errors_total{{endpoint="{e}",status="{s}"}} {n}'
                for (e, s), n in requests
                if s >= 400
            ]
            lines += _header("seq2seq_requests_in_flight", "gauge", "Requests received and not yet answered.")
            lines += [
                f'seq2seq_requests_in_flight{{endpoint="{e}"}} {n}'
                for e, n in sorted(self._in_flight.items())
            ]
            lines += _header(
                "seq2seq_request_duration_seconds", "histogram", "Time from request to response."
            )
            for endpoint, histogram in sorted(self._latency.items()):
                lines += histogram.lines("seq2seq_request_duration_seconds", f'endpoint="{endpoint}",')
            lines += _header("seq2seq_batch_requests", "histogram", "Requests served by one model call.")
            lines += self._batch_requests.lines("seq2seq_batch_requests")
            lines += _header(
                "seq2seq_batch_sentences", "histogram", "Sentences translated by one model call."
            )
            lines += self._batch_sentences.lines("seq2seq_batch_sentences")
            lines += _header(
                "seq2seq_cancelled_sentences_total",
                "counter",
                "Sentences not decoded: their client went away, or the server stopped waiting.",
            )
            lines.append(f"seq2seq_cancelled_sentences_total {self._cancelled}")
        lines += _header("seq2seq_queue_depth", "gauge", "Requests waiting for the model.")
        lines.append(f"seq2seq_queue_depth {queue_depth}")
        return "\n".join(lines) + "\n"
