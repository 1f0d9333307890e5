"""Reminders and alarms: parsed from speech, stored in the state directory, spoken when due.

The scheduler thread sleeps on a condition until the next due time (woken early by a new
reminder or stop), fires due reminders through a callback (the answerer speaks them), and
removes them from ``reminders.json``. Reminders that fell due while the process was down fire
as soon as it starts again.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.when import parse_when
from rkvoice.errors import RkvoiceError
from rkvoice.state import StateStore
from rkvoice.text.cn import clock_hm, cn_int

log = logging.getLogger(__name__)

NAME = "reminder"
FILE = "reminders"
MAX_WAIT_S = 30.0
"""Re-check at least this often, so a wall-clock jump (NTP at boot) is noticed."""

_TRIGGERS = ("提醒我", "提醒", "叫我", "叫醒我", "喊我", "闹钟", "叫醒")
_LIST = re.compile(r"(?:有哪些|有什么|有几个|查看|看看|看一下|列出|都有)(?:的)?(?:提醒|闹钟)|(?:提醒|闹钟)(?:有哪些|有什么|有几个|是什么)")
_CANCEL = re.compile(r"(?:取消|删除|删掉|关掉|关闭|去掉|不要)(?:所有|全部)?(?:的)?(?:提醒|闹钟)")


def speakable_user_text(text: str) -> str:
    from rkvoice.text.normalize import speakable

    return speakable(text)


def spoken_due(due: datetime, now: datetime) -> str:
    days = (due.date() - now.date()).days
    day = {0: "今天", 1: "明天", 2: "后天"}.get(days, f"{cn_int(due.month)}月{cn_int(due.day)}日")
    return day + clock_hm(due.hour, due.minute)


def spoken_delta(delta: timedelta) -> str:
    s = round(delta.total_seconds())
    if s < 60:
        return f"{cn_int(s)}秒"
    minutes = s // 60
    h, m = divmod(minutes, 60)
    if h and m == 30:
        return f"{'两' if h == 2 else cn_int(h)}个半小时"
    if not h and m == 30:
        return "半小时"
    out = ""
    if h:
        out += f"{'两' if h == 2 else cn_int(h)}个小时"
    if m:
        out += f"{'两' if m == 2 else cn_int(m)}分钟"
    return out


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
            raise RkvoiceError("state", "bad-reminders", f"{self.store.path(FILE)} must hold a list; move it aside")
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

    @staticmethod
    def due_text(item: dict[str, Any], now: datetime) -> str:
        if item["text"]:
            return f"到时间了，提醒你{speakable_user_text(item['text'])}。"
        return f"现在是{clock_hm(now.hour, now.minute)}，闹钟响了。"

    def pop_due(self) -> list[dict[str, Any]]:
        """Remove and return the reminders due now (the file is rewritten before they are spoken)."""
        with self._cond:
            now_ts = self.now().timestamp()
            items = self.items()
            due = [r for r in items if r["due"] <= now_ts]
            if due:
                self.store.save(FILE, [r for r in items if r["due"] > now_ts])
        return due

    def fire_due(self) -> list[str]:
        """Speak every due reminder through ``on_due``; returns the texts (one pass, no waiting)."""
        texts = [self.due_text(r, self.now()) for r in self.pop_due()]
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
                if self._stop:
                    return
                wait = self.seconds_to_next()
                self._cond.wait(timeout=MAX_WAIT_S if wait is None else min(wait, MAX_WAIT_S))
                if self._stop:
                    return


def _content(text: str, span: tuple[int, int]) -> str:
    rest = text[: span[0]] + " " + text[span[1]:]
    for trig in ("提醒我", "叫醒我", "叫我", "喊我", "提醒"):
        if trig in rest:
            rest = rest.split(trig, 1)[1]
            break
    else:
        return ""
    rest = re.sub(r"\s+", "", rest)
    rest = re.sub(r"^(?:一下|一声|你)+|(?:吧|哦|啊|呀|好吗|可以吗|好不好)$", "", rest)
    return rest


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    if ctx.scheduler is None or not any(t in text for t in _TRIGGERS):
        return None
    sched = ctx.scheduler
    now = ctx.now()
    if _CANCEL.search(text):
        kind = None if ("所有" in text or "全部" in text) else ("alarm" if "闹钟" in text else "reminder")
        n = sched.cancel(kind)
        what = "闹钟" if kind == "alarm" else "提醒"
        return ToolAnswer(NAME, f"好的，已取消{'两' if n == 2 else cn_int(n)}个{what}。" if n else f"现在没有{what}。")
    if _LIST.search(text):
        items = sched.items()
        if not items:
            return ToolAnswer(NAME, "你现在没有提醒和闹钟。")
        parts = []
        for r in items:
            due = datetime.fromtimestamp(r["due"], tz=now.tzinfo)
            what = speakable_user_text(r["text"]) if r["text"] else "闹钟"
            parts.append(f"{spoken_due(due, now)}，{what}")
        return ToolAnswer(NAME, f"你有{'两' if len(items) == 2 else cn_int(len(items))}个提醒：" + "；".join(parts) + "。")
    when = parse_when(text, now)
    if when is None:
        return ToolAnswer(NAME, "要在什么时候提醒你？比如说，二十分钟后提醒我吃药。")
    content = _content(text, when.span)
    is_alarm = "闹钟" in text or "叫醒" in text or (content in ("起床", "") and "叫我" in text)
    kind = "alarm" if is_alarm else "reminder"
    sched.add(when.due, content, kind)
    at = spoken_delta(when.relative) + "后" if when.relative is not None else spoken_due(when.due, now)
    if content:
        verb = "叫你" if "叫" in text or "喊" in text else "提醒你"
        return ToolAnswer(NAME, f"好的，{at}{verb}{speakable_user_text(content)}。")
    return ToolAnswer(NAME, f"好的，闹钟定在{at}。" if kind == "alarm" else f"好的，{at}提醒你。")
