"""The router: try each tool on the cleaned transcript; the first answer wins, None -> the LLM."""

from __future__ import annotations

import logging

import rkvoice.answer.tools.arithmetic as arithmetic
import rkvoice.answer.tools.clock as clock
import rkvoice.answer.tools.device as device
import rkvoice.answer.tools.network as network
import rkvoice.answer.tools.reminders as reminders
import rkvoice.answer.tools.stop as stop
import rkvoice.answer.tools.todos as todos
import rkvoice.answer.tools.weather as weather
from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.match import clean

log = logging.getLogger(__name__)

# Order matters: "明天早上七点叫我" is a reminder before it is a clock question.
HANDLERS = (stop.handle, reminders.handle, todos.handle, arithmetic.handle, clock.handle,
            device.handle, network.handle, weather.handle)


def route(transcript: str, ctx: ToolContext) -> ToolAnswer | None:
    """A tool's answer for ``transcript``, or None when the LLM should answer."""
    text = clean(transcript)
    if not text:
        return None
    for handler in HANDLERS:
        answer = handler(text, ctx)
        if answer is not None:
            log.debug("routed %r to tool %s", transcript, answer.tool)
            return answer
    return None
