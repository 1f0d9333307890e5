"""Local tools answering exact facts in speakable Chinese; ``route`` picks one or returns None."""

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.router import route

__all__ = ["ToolAnswer", "ToolContext", "route"]
