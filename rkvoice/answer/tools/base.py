"""What a tool returns, and what tools may use (wall clock, state, scheduler, sysfs roots)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rkvoice.config import HearConfig

if TYPE_CHECKING:
    from rkvoice.answer.tools.scheduler import ReminderScheduler
    from rkvoice.state import StateStore


@dataclass(frozen=True)
class ToolAnswer:
    tool: str
    """Tool name, e.g. "time", "arithmetic" (the route is "tool:<name>")."""
    text: str
    """Speakable Chinese (no digits); empty for pure actions such as stop."""
    action: str = ""
    """A side effect the caller performs: "stop" = stop speaking."""


def local_now() -> datetime:
    return datetime.now().astimezone()


@dataclass
class ToolContext:
    """Everything tools touch outside themselves: wall clock, state, reminders, /sys and /proc, the name."""

    store: StateStore
    scheduler: ReminderScheduler
    now: Callable[[], datetime] = local_now
    """Wall-clock time with the local time zone."""
    sys_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    name: str = field(default_factory=lambda: HearConfig().name)
    """What the user calls the assistant (``hear.name``, from the wake phrase): tools skip it in requests."""
