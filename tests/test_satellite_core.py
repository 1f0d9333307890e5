"""The satellite's core, below the protocol: which audio a request sends (never more than the user meant),
the run state kept by one owner (transcripts credited to their own run, ends and beginnings in any
order), and the faults on the link's edge (a disconnect, our own errors against the peer's bad input)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from fakes import RecordingPlayer
from wyoming.event import Event

from rkvoice.config import load_config
from rkvoice.hear.vad import Segment
from rkvoice.hear.wake import WakeHit
from rkvoice.satellite.link import RATE, SatelliteLink
from rkvoice.satellite.mic import SatelliteMic
from rkvoice.satellite.playback import Playback
from rkvoice.satellite.timers import TimerTable
from tests.support.clock import FakeClock

FRAME = 512


def config() -> Any:
    cfg = load_config()
    return replace(cfg, satellite=replace(cfg.satellite, uri="tcp://127.0.0.1:0"))


class SentLink(SatelliteLink):
    """The link with HA running the satellite and no connection: what it would send is kept."""

    def __init__(self) -> None:
        cfg = config()
        clock = FakeClock()
        super().__init__(cfg, Playback(RecordingPlayer(cfg, clock), None, clock=clock), TimerTable(clock), clock)
        self.sent: list[Event] = []
        self.running.set()

    def send(self, event: Event) -> None:
        self.sent.append(event)

    def chunks(self) -> list[np.ndarray]:
        return [np.frombuffer(e.payload or b"", "<i2") for e in self.sent if e.type == "audio-chunk"]


class SegmentWake:
    """Wakes at frame ``at_frame``; the segment it tells of (``on_segment``, as asr-match does) spans
    ``seg_s`` (start, end) of stream time; the hit ends at ``end_s`` (its own frame's end when None)."""

    def __init__(self, at_frame: int, seg_s: tuple[float, float], request: str = "打开客厅灯",
                 end_s: float | None = None) -> None:
        self.at_frame, self.seg_s, self.request, self.end_s = at_frame, seg_s, request, end_s
        self.frames: list[np.ndarray] = []
        self.on_segment: Any = None

    def load(self) -> None:
        pass

    def restart(self, at_sample: int) -> None:
        pass

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        self.frames.append(frame)
        if len(self.frames) != self.at_frame:
            return None
        start, end = self.seg_s
        heard = np.concatenate(self.frames)[round(start * RATE): round(end * RATE)]
        self.on_segment(Segment(heard, start, end, len(self.frames) * FRAME / RATE))
        end_s = self.end_s if self.end_s is not None else len(self.frames) * FRAME / RATE
        return WakeHit(len(self.frames) * FRAME / RATE, end_s, "小智小智" + self.request, self.request)

    def flush(self) -> WakeHit | None:
        return None


def level(k: int) -> float:
    """Frame k's value: each frame of the room is told apart by its first sample once sent as int16."""
    return (k % 1000 + 1) / 2000.0


def pcm(value: float) -> int:
    return round(value * 32767.0)


def feed(mic: SatelliteMic, n: int, first: int = 0) -> None:
    for k in range(first, first + n):
        mic.accept(np.full(FRAME, level(k), np.float32))


@pytest.mark.parametrize("request_text", ["打开客厅灯", ""])
def test_a_request_whose_segment_does_not_line_up_starts_at_the_wake_phrases_end(request_text):
    """20 s of room audio, then a wake whose segment closed 2 s before the hit's end (they do not line up):
    the first sample sent is the one at the wake phrase's end, never the room audio before it (the 30 s
    behind the wake were sent before)."""
    link = SentLink()
    at = 625  # 20 s of frames
    wake = SegmentWake(at, (15.0, 18.0), request=request_text)
    mic = SatelliteMic(wake, link, link.playback)
    feed(mic, at)
    assert mic.run is not None
    end_frame = at  # the hit ends at its own frame's end: the next frame is the first after the phrase
    feed(mic, 3, first=at)
    first = next(c[0] for c in link.chunks() if len(c))
    if request_text:  # said in one breath: its audio is lost with the segment; a little silence, and audio-stop
        assert first == 0 and link.sent[-1].type == "audio-stop"
    else:
        assert first == pcm(level(end_frame)), (first, pcm(level(0)))
    sent = np.concatenate(link.chunks())
    assert not np.isin(sent, [pcm(level(k)) for k in range(at)]).any()  # nothing of the room before the wake


def test_a_request_said_in_one_breath_sends_its_segment_from_its_start():
    link = SentLink()
    at = 625
    end_s = at * FRAME / RATE
    wake = SegmentWake(at, (end_s - 3.0, end_s))
    mic = SatelliteMic(wake, link, link.playback)
    feed(mic, at)
    sent = np.concatenate(link.chunks())
    first_frame = round((end_s - 3.0) * RATE) // FRAME
    assert sent[0] == pcm(level(first_frame))
    assert len(sent) >= 3.0 * RATE and not np.isin(sent, [pcm(level(k)) for k in range(first_frame)]).any()
    assert link.sent[-1].type == "audio-stop"


def test_the_head_of_a_request_is_capped_in_seconds():
    """A one-breath segment longer than the request's cap (a TV talking after the phrase): at most
    ``max_request_s`` of it is sent, from its start."""
    link = SentLink()
    at = 700
    end_s = at * FRAME / RATE
    wake = SegmentWake(at, (1.0, end_s))
    mic = SatelliteMic(wake, link, link.playback, max_request_s=5.0)
    feed(mic, at)
    sent = np.concatenate(link.chunks())
    assert sent[0] == pcm(level(RATE // FRAME))
    assert len(sent) <= 5.0 * RATE + RATE // 4  # the cap, and the quarter second of silence after it
