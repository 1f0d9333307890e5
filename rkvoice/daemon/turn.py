"""StagedLoop: one turn = listen -> answer -> speak, with a deadline on the answer stream.

An answerer that stops producing text (a wedged LLM) must not hold the turn forever: the
answer's deltas are pulled on their own thread into a queue, and the consumer gives up
after ``first_timeout`` seconds without a first delta or ``gap_timeout`` seconds between
two deltas. Giving up sets the turn's cancel event (the answerer aborts its generation)
and raises ``RkvoiceError("answer", "timeout")``; the supervisor then apologises.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.errors import RkvoiceError

from .stages import Answerer, Host, Listener, Speaker, TurnReport

log = logging.getLogger(__name__)

_END = object()


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def deadline_deltas(
    deltas: Iterable[str],
    cancel: threading.Event,
    first_timeout: float,
    gap_timeout: float,
) -> Iterator[str]:
    """Yield ``deltas`` but raise RkvoiceError("answer", "timeout") when they stall."""
    q: queue.Queue[Any] = queue.Queue()

    def pump() -> None:
        try:
            for delta in deltas:
                q.put(delta)
                if cancel.is_set():
                    break
        except BaseException as exc:  # handed to the consumer, re-raised there
            q.put(_Raised(exc))
        finally:
            q.put(_END)

    worker = threading.Thread(target=pump, name="answer-stream", daemon=True)
    worker.start()
    timeout = first_timeout
    while True:
        try:
            item = q.get(timeout=timeout)
        except queue.Empty:
            cancel.set()
            what = "a first word" if timeout is first_timeout else "the next words"
            raise RkvoiceError(
                "answer",
                "timeout",
                f"the answerer produced no {what} within {timeout:g} s; the turn was aborted "
                "(raise daemon.answer_first_timeout_s / answer_gap_timeout_s if the model is just slow)",
            ) from None
        if item is _END:
            return
        if isinstance(item, _Raised):
            raise item.exc
        timeout = gap_timeout
        yield item


class StagedLoop:
    """A TurnLoop over three loaded stages (see stages.py)."""

    def __init__(
        self,
        listener: Listener,
        answerer: Answerer,
        speaker: Speaker,
        first_timeout: float = 20.0,
        gap_timeout: float = 10.0,
        clock: Clock | None = None,
        host: Host | None = None,
    ) -> None:
        self.host = host
        self.listener = listener
        self.answerer = answerer
        self.speaker = speaker
        self.first_timeout = first_timeout
        self.gap_timeout = gap_timeout
        self.clock = clock or MonotonicClock()
        self._cancel = threading.Event()

    def run_once(self, stop: threading.Event) -> TurnReport | None:
        if self.host is None:
            return self._run_once(stop)
        with self.host.busy("turn"):
            return self._run_once(stop)

    def _run_once(self, stop: threading.Event) -> TurnReport | None:
        heard = self.listener.listen(stop)
        if heard is None or stop.is_set():
            return None
        t_heard = self.clock.now()
        cancel = self._cancel = threading.Event()
        report = TurnReport(transcript=heard.text)
        latency = report.latency_ms
        if heard.asr_ms is not None:
            latency["asr_ms"] = round(heard.asr_ms, 1)
        if not heard.text.strip():
            log.info("heard nothing intelligible; turn skipped")
            return report
        answer = self.answerer.answer(heard.text, cancel)
        report.route = answer.route
        first: list[float] = []

        def counted() -> Iterator[str]:
            for delta in deadline_deltas(answer.deltas, cancel, self.first_timeout, self.gap_timeout):
                if not first:
                    first.append(self.clock.now())
                report.answer_chars += len(delta)
                log.debug("answer delta %r", delta)
                yield delta

        spoken = self.speaker.speak(counted(), cancel)
        end = self.clock.now()
        if first:
            latency["answer_first_ms"] = round((first[0] - t_heard) * 1000, 1)
        if spoken.first_audio is not None:
            latency["end_to_first_audio_ms"] = round((spoken.first_audio - heard.speech_end) * 1000, 1)
        latency["turn_ms"] = round((end - heard.speech_end) * 1000, 1)
        report.cancelled = spoken.cancelled or cancel.is_set()
        return report

    def stop_speaking(self) -> None:
        self._cancel.set()
        self.speaker.cancel()

    def apologise(self, text: str) -> None:
        try:
            self.speaker.speak([text], threading.Event())
        except Exception as exc:  # the speaker itself may be what failed
            log.error("could not speak the apology: %s", exc)
