"""Dynamic batching: one worker thread owns the model, and requests that arrive together share a call.

A sentence decoded alone leaves the matrix multiplies tiny; many decoded together cost little
more. Requests wait in a bounded queue. The worker takes the oldest, waits at most ``max_wait_s``
for others, groups what it has by identical decoding settings, packs each group's sentences into
the translator's token-budget batches and makes one :meth:`TranslatorBase.translate` call per
batch. Each sentence's result is what ``translate`` gives it alone (batched decoding equals
one-by-one decoding), whatever else is in the batch. A request's Future stays pending until its
results are in, so cancelling it (its client went away, the server stopped waiting) drops its
sentences from the batches not yet decoded. Other model work (attention maps) runs on the same
thread between batches, so the model is never used by two threads at once.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from seq2seq.config import DecodeConfig
from seq2seq.inference.translator import Translation, TranslatorBase, token_budget_batches
from seq2seq.serving.metrics import ServingMetrics

log = logging.getLogger(__name__)

MAX_GATHER_SENTENCES = 512  # stop gathering at this many sentences: latency stays bounded under load


class QueueFullError(RuntimeError):
    """The request queue is full (or the server is stopping): the client should retry later."""


class ShuttingDownError(QueueFullError):
    """The server is stopping: the client should retry, on a new connection (this one closes)."""


@dataclass
class _TranslateJob:
    texts: list[str]
    cfg: DecodeConfig
    prefixes: list[str]  # one per text, "" for none
    constraints: list[list[str]]  # one list of phrases per text
    in_order: bool  # the phrases appear in the order given
    future: Future[list[list[Translation]]] = field(default_factory=Future)


@dataclass
class _CallJob:
    call: Callable[[], Any]
    future: Future[Any] = field(default_factory=Future)


_STOP = object()  # queued by close(): everything before it is still served


class DynamicBatcher:
    """Queue + worker thread around a translator of any backend; submit from any thread, get a Future."""

    def __init__(
        self,
        translator: TranslatorBase,
        queue_size: int,
        max_wait_s: float = 0.005,
        metrics: ServingMetrics | None = None,
    ) -> None:
        self.translator = translator
        self.max_wait_s = max_wait_s
        self.metrics = metrics or ServingMetrics()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._held: Any = None  # a job taken while gathering that cannot join the batch
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="seq2seq-batcher", daemon=True)

    @property
    def depth(self) -> int:
        """Requests waiting for the worker."""
        return self._queue.qsize()

    def start(self) -> None:
        self._thread.start()

    def translate(
        self,
        texts: list[str],
        cfg: DecodeConfig,
        prefixes: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        constraints_in_order: bool = False,
    ) -> Future[list[list[Translation]]]:
        """Queue ``texts`` (with their ``prefixes``, "" for none, and ``constraints``); the Future gets
        their n-best lists in order, as ``TranslatorBase.translate``."""
        prefixes, constraints = prefixes or [""] * len(texts), constraints or [[] for _ in texts]
        job = _TranslateJob(texts, cfg, prefixes, constraints, constraints_in_order)
        return self._put(job).future

    def call(self, function: Callable[[], Any]) -> Future[Any]:
        """Run ``function`` on the worker thread, alone, when its turn comes."""
        return self._put(_CallJob(function)).future

    def close(self, timeout: float | None = None) -> bool:
        """Stop accepting work, finish what is queued (a cancelled request costs nothing), then stop
        the worker. False if it is still busy after ``timeout`` seconds: a model call cannot be
        interrupted, and the worker, a daemon thread, ends with the process."""
        if self._closed or not self._thread.is_alive():
            self._closed = True
            return not self._thread.is_alive()
        self._closed = True
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._queue.put(_STOP, timeout=timeout)  # waits while the queue is full: the worker drains it
        except queue.Full:
            return False
        self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    def _put(self, job: _TranslateJob | _CallJob) -> _TranslateJob | _CallJob:
        if self._closed:
            raise ShuttingDownError("the server is shutting down")
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFullError(f"the request queue is full ({self._queue.maxsize} waiting)") from None
        return job

    def _next(self) -> Any:
        job, self._held = self._held, None
        return job if job is not None else self._queue.get()

    def _work(self) -> None:
        while (job := self._next()) is not _STOP:
            if isinstance(job, _CallJob):
                _run(job.future, job.call)
            else:
                self._translate(self._gather(job))
        while True:  # a job that raced close() past the stop mark is refused, not left hanging
            try:
                late = self._queue.get_nowait()
            except queue.Empty:
                return
            if late.future.set_running_or_notify_cancel():
                late.future.set_exception(ShuttingDownError("the server is shutting down"))

    def _gather(self, first: _TranslateJob) -> list[_TranslateJob]:
        """``first`` plus the translation jobs that arrive within ``max_wait_s`` of taking it."""
        jobs, sentences = [first], len(first.texts)
        deadline = time.monotonic() + self.max_wait_s
        while sentences < MAX_GATHER_SENTENCES:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if not isinstance(job, _TranslateJob):
                self._held = job
                break
            jobs.append(job)
            sentences += len(job.texts)
        return jobs

    def _translate(self, jobs: list[_TranslateJob]) -> None:
        """The jobs, grouped by identical decoding configs and constraint order (a group shares
        batches), in order of arrival."""
        groups: list[tuple[tuple[DecodeConfig, bool], list[_TranslateJob]]] = []
        for job in jobs:
            group = next((g for key, g in groups if key == (job.cfg, job.in_order)), None)
            if group is None:
                groups.append(((job.cfg, job.in_order), [job]))
            else:
                group.append(job)
        for (cfg, _), group in groups:
            self._translate_group(cfg, group)

    def _translate_group(self, cfg: DecodeConfig, group: list[_TranslateJob]) -> None:
        """One ``translate`` call per token-budget batch of the group's sentences, leaving out those
        of cancelled jobs; results go back job by job."""
        texts = [text for job in group for text in job.texts]
        prefixes = [prefix for job in group for prefix in job.prefixes]
        constraints = [phrases for job in group for phrases in job.constraints]
        owners = [job for job in group for _ in job.texts]
        results: list[list[Translation]] = [[] for _ in texts]
        decoded = 0
        try:
            sources = self.translator.encode(texts)
            blank = [i for i, ids in enumerate(sources) if not ids]  # no model call: they translate to ""
            budget = self.translator.batch_tokens
            for rows in [blank, *(b.tolist() for b in token_budget_batches(sources, budget))]:
                live = [i for i in rows if not owners[i].future.cancelled()]
                self.metrics.cancelled(len(rows) - len(live))
                if live:
                    translated = self.translator.translate(
                        [texts[i] for i in live],
                        cfg,
                        [prefixes[i] for i in live],
                        [constraints[i] for i in live],
                        group[0].in_order,
                    )
                    for i, nbest in zip(live, translated, strict=True):
                        results[i] = nbest
                    decoded += len(live)
        except Exception as err:  # the requests fail with it; the worker keeps serving
            log.exception("translation of a batch of %d sentences failed", len(texts))
            for job in group:
                if job.future.set_running_or_notify_cancel():
                    job.future.set_exception(err)
            return
        answered, start = 0, 0
        for job in group:
            if job.future.set_running_or_notify_cancel():
                job.future.set_result(results[start : start + len(job.texts)])
                answered += 1
            start += len(job.texts)
        if answered:
            self.metrics.batch(answered, decoded)


def _run(future: Future[Any], function: Callable[[], Any]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(function())
    except Exception as err:
        future.set_exception(err)
