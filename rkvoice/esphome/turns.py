"""The ESPHome adapter's records of a voice turn: what it knows of a run Home Assistant's pipeline runs
(``Turn``), what follows a reply or announcement once played (``Finish``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rkvoice.satellite.state import Run

ABANDONED = ("paused", "disconnected", "replaced", "no transcript")
"""Why a run ends that Home Assistant is told to abort (VoiceAssistantRequest(start=False))."""


@dataclass
class Turn:
    """What the adapter knows of one run Home Assistant's pipeline runs."""

    run: Run
    heard_from_ha: bool = False
    """A pipeline event came for it."""
    continues: bool = False
    """INTENT_END said the conversation continues."""
    replying: bool = False
    """The answer's URL is being played (AnnounceFinished follows it)."""
    tts_url: str = ""
    """RUN_START's URL of the answer's audio (played early when INTENT_PROGRESS says the TTS streams)."""
    timeout: asyncio.TimerHandle | None = None


@dataclass(frozen=True)
class Finish:
    """What follows the last stream of a reply or an announcement once it has played."""

    then_listen: bool
    """Start a run without the wake phrase (start_conversation)."""
    turn: Turn | None = None
    """The run whose answer this is: it listens again if its conversation continues (known by then)."""

    @property
    def listens(self) -> bool:
        return self.then_listen or (self.turn is not None and self.turn.continues)
