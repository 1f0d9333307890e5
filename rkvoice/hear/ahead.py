"""Transcripts started before their segment closes (``hear.transcribe_ahead``).

A request ends after ``hear.trailing_silence_ms`` of silence (500 ms), but most of it is known after
the first 150 ms: the segmenter's short-silence VAD calls ``on_pause`` with the speech so far, the
ASR starts on it in the background, and when the segment closes on the same speech its transcript is
that one, already done or finishing, instead of a decode begun 350 ms later. With the end-of-turn
decision (rkvoice.hear.turn_end) ``on_pause`` comes at its short silence, as the model starts judging:
the transcript is made while it judges, and used only if the request ends on that speech. If the speaker goes on,
the closed segment is longer than the paused one and is decoded anew (the early decode was spare
CPU: it ends before the longer segment can close, at least 500 ms of silence later).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from rkvoice.hear.vad import SAME_END

log = logging.getLogger(__name__)


def same_speech(paused: np.ndarray, closed: np.ndarray) -> bool:
    """The closed segment is the paused speech: the same samples but for up to ``SAME_END`` of
    silence more or less at the end (the main VAD cuts its segment a window or two off the short one)."""
    n = min(len(paused), len(closed))
    return n > 0 and abs(len(closed) - len(paused)) <= SAME_END and np.array_equal(paused[:n], closed[:n])


class TranscribeAhead:
    """``asr`` (loaded) with ``ahead(samples)``: decode this speech on a worker thread now; a later
    ``transcribe`` of the same speech takes that result. Other attributes are ``asr``'s. One decode
    runs at a time; a newer pause replaces an older one not started yet."""

    def __init__(self, asr: Any) -> None:
        self.asr = asr
        self._lock = threading.Lock()
        self._job: tuple[np.ndarray, Future[str]] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rkvoice-asr-ahead")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.asr, name)

    def ahead(self, samples: np.ndarray) -> Future[str]:
        """Start decoding ``samples``; the transcript to come."""
        with self._lock:
            if self._job is not None:
                self._job[1].cancel()  # only if it has not started
            self._job = (samples, self._pool.submit(self.asr.transcribe, samples))
            return self._job[1]

    def transcribe(self, samples: np.ndarray) -> str:
        with self._lock:
            job = self._job
            if job is None or not same_speech(job[0], samples):
                job = None
            else:
                self._job = None
        if job is not None:
            try:
                text: str = job[1].result()
                log.debug("the transcript of %.2f s of speech was begun at its pause", len(samples) / 16000)
                return text
            except Exception:  # decoded again below, where the error is this call's
                log.debug("the decode ahead failed", exc_info=True)
        return self.asr.transcribe(samples)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
