"""The reminder scheduler: reminders kept in ``reminders.json``, spoken through a callback when due.

Its thread sleeps until the next due time (woken early by a new reminder or stop); reminders that
fell due while the process was down fire as soon as it starts again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.state import StateStore
from rkvoice.text.normalize import speakable
from rkvoice.text.spoken_numbers import clock_hm

log = logging.getLogger(__name__)

FILE = "reminders"
MAX_WAIT_S = 30.0
"""Re-check at least this often, so a wall-clock jump (NTP at boot) is noticed."""


class ReminderScheduler:
    """Persisted reminders; ``start()`` runs a thread calling ``on_due(text)`` when each is due."""

    def __init__(self, store: StateStore, now: Callable[[], datetime],
                 on_due: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.now = now
        self.on_due = on_due
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    def items(self) -> list[dict[str, Any]]:
        data = self.store.load(FILE, [])
        if not isinstance(data, list):
            raise RkvoiceError(Stage.STATE, "bad-reminders", f"{self.store.path(FILE)} must hold a list; move it aside")
        return sorted(data, key=lambda r: r["due"])

    def add(self, due: datetime, text: str, kind: str = "reminder") -> dict[str, Any]:
        with self._cond:
            items = self.items()
            item = {"id": max((r["id"] for r in items), default=0) + 1, "due": due.timestamp(),
                    "text": text, "kind": kind}
            items.append(item)
            self.store.save(FILE, items)
            self._cond.notify_all()
        return item

    def cancel(self, kind: str | None = None) -> int:
        with self._cond:
            items = self.items()
            keep = [r for r in items if kind is not None and r["kind"] != kind]
            self.store.save(FILE, keep)
            self._cond.notify_all()
        return len(items) - len(keep)

    def fire_due(self) -> list[str]:
        """Speak every due reminder through ``on_due`` (removed from the file first); returns the texts."""
        with self._cond:
            now_ts = self.now().timestamp()
            items = self.items()
            due = [r for r in items if r["due"] <= now_ts]
            if due:
                self.store.save(FILE, [r for r in items if r["due"] > now_ts])
        now = self.now()
        texts = [f"到时间了，提醒你{speakable(r['text'])}。" if r["text"]
                 else f"现在是{clock_hm(now.hour, now.minute)}，闹钟响了。" for r in due]
        for text in texts:
            log.info("reminder due: %s", text)
            if self.on_due is not None:
                try:
                    self.on_due(text)
                except Exception:
                    log.exception("speaking a reminder failed")
        return texts

    def seconds_to_next(self) -> float | None:
        items = self.items()
        return None if not items else max(0.0, items[0]["due"] - self.now().timestamp())

    def start(self) -> None:
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._run, name="reminders", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while True:
            self.fire_due()
            with self._cond:
                if not self._stop:
                    wait = self.seconds_to_next()
                    self._cond.wait(timeout=MAX_WAIT_S if wait is None else min(wait, MAX_WAIT_S))
                if self._stop:
                    return
