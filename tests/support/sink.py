"""A Speaker on a sink: the product's Speaker (both its threads, its chunking and crossfades) playing
into a null player, by default on a controlled clock, so a piece counts as heard as soon as it is handed
over and a bench times synthesis, not playback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rkvoice.audio.sinks import NullPlayer
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.speaker import Speaker
from rkvoice.timeline import Timeline
from rkvoice.tts.base import TtsEngine
from tests.support.clock import FakeClock


def draining_player(cfg: Config) -> NullPlayer:
    """A null player on its own FakeClock: takes every block at once (no real-time pacing)."""
    player = NullPlayer(cfg, FakeClock())
    player.open()
    return player


@contextmanager
def sink_speaker(engine: TtsEngine, cfg: Config, clock: Clock | None = None, drain: bool = True) -> Iterator[Speaker]:
    """A loaded Speaker on ``engine`` (loaded by the caller) into a null player, its marks on ``clock``
    (the real clock by default); closed on exit. The player drains at once, or with ``drain=False``
    plays at ``clock``'s pace (a listener's time: a turn ends when its audio has played)."""
    clock = clock or MonotonicClock()
    player = draining_player(cfg) if drain else NullPlayer(cfg, clock)
    player.open()
    speaker = Speaker(engine, player, cfg, clock)
    speaker.load()
    try:
        yield speaker
    finally:
        speaker.close()
        player.close()


def speak_through(speaker: Speaker, text: str, timeout: float = 600.0) -> Timeline:
    """Speak ``text`` as one turn and wait for it; its timeline (``summary()``: first_audio_ms,
    max_gap_ms, chunks, ...). A turn that fails, is cancelled or times out is an RkvoiceError naming why."""
    timeline = Timeline(speaker.clock)
    turn = speaker.speak(text, timeline)
    played = speaker.wait(turn, timeout=timeout)
    if not played or turn.cancelled or turn.exception is not None:
        raise RkvoiceError(Stage.SPEAK, "speak-failed",
                           f"speaking {text[:30]!r} ended with {turn.reason or 'a timeout'}: {turn.exception}")
    return timeline
