"""rkvoice as a satellite of the REAL Home Assistant (tests/ha_home.py: 2026.2.3, zh-Hans, a light 客厅灯 in
area 客厅, a thermostat 空调): HA's wyoming config flow adds (1) rkvoice's Wyoming services server as the
pipeline's speech-to-text and text-to-speech and (2) the satellite. Requests are SPOKEN by the portable voice
into the satellite's microphone in real time and woken on the board by the real portable wake engine
(asr-match on Whisper): the light turns on, a 10 s timer set through the satellite finishes and is said on
the board, and ``assist_satellite.announce`` plays there. The sentences are ones HA's zh-CN intents match and
Whisper base hears right from the portable voice: 打开大灯 (the light's alias), 设置定时十秒 (heard as 设置定时10秒). Skips (saying why) without the HA venv or models.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from fakes import RecordingPlayer, wait_until

from tests.ha_home import HomeHa, home_ha, require_ha_venv

RATE = 16000
FRAME = 512
PAUSE_S = 1.0
"""Silence between the wake phrase and the request (the wake is decided during it)."""


class LiveMic:
    """A microphone in real time: what ``say()`` queued, else silence, one frame every 32 ms."""

    sample_rate = RATE

    def __init__(self) -> None:
        self._queued: deque[np.ndarray] = deque()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.said_end: float | None = None
        """time.monotonic() when the last queued sample was heard."""

    def say(self, audio: np.ndarray) -> None:
        padded = np.concatenate([audio, np.zeros(-len(audio) % FRAME, np.float32)]).astype(np.float32)
        with self._lock:
            self._queued.extend(padded.reshape(-1, FRAME))
            self.said_end = None

    def frames(self) -> Iterator[np.ndarray]:
        t0, n = time.monotonic(), 0
        while not self._closed.is_set():
            with self._lock:
                frame = self._queued.popleft() if self._queued else np.zeros(FRAME, np.float32)
                if not self._queued and self.said_end is None:
                    self.said_end = time.monotonic()
            n += 1
            if self._closed.wait(max(0.0, t0 + n * FRAME / RATE - time.monotonic())):
                return
            yield frame

    def close(self) -> None:
        self._closed.set()


class WakeOnly:
    """The hear stage as the satellite reads it: the real wake engine."""

    def __init__(self, wake: Any) -> None:
        self.wake = wake


def spoken(voice: Any, text: str) -> np.ndarray:
    """``text`` said by the portable voice, at 16 kHz, its own silence trimmed."""
    import soxr

    audio, rate = voice.generate(text)
    audio = soxr.resample(np.asarray(audio, np.float32), rate, RATE).astype(np.float32)
    loud = np.flatnonzero(np.abs(audio) > 1e-3)
    return audio[loud[0] : loud[-1] + 1]


def request(voice: Any, text: str) -> np.ndarray:
    """小智小智, a pause, the request, a second of silence."""
    pause, tail = np.zeros(int(PAUSE_S * RATE), np.float32), np.zeros(RATE, np.float32)
    return np.concatenate([spoken(voice, "小智小智"), pause, spoken(voice, text), tail])


@pytest.fixture(scope="module")
def home(hear_asr, hear_voice, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """HA with rkvoice's services in its pipeline and the satellite added; the satellite's microphone."""
    require_ha_venv()
    from rkvoice.answer.assistant import Assistant
    from rkvoice.config import WyomingConfig, load_config
    from rkvoice.hear.wake_registry import create_wake
    from rkvoice.satellite.run import Satellite
    from rkvoice.stages import Speak, wake_factory
    from rkvoice.state import StateStore
    from rkvoice.wyoming.engines import Engines
    from rkvoice.wyoming.server import serve_wyoming

    work = tmp_path_factory.mktemp("satellite_e2e")
    base = load_config()
    cfg = replace(base, satellite=replace(base.satellite, uri="tcp://127.0.0.1:0", name="rkvoice", area="客厅"))
    engines = Engines(asr=hear_asr, tts=hear_voice, assistant=Assistant(cfg, store=StateStore(work / "state")),
                      wake_factory=wake_factory(cfg))
    stop, ready, servers = threading.Event(), threading.Event(), []
    server = threading.Thread(target=serve_wyoming, args=(replace(cfg, wyoming=WyomingConfig()), "tcp://127.0.0.1:0"),
                              kwargs={"engines": engines, "stop": stop,
                                      "ready": lambda s: (servers.append(s), ready.set())}, daemon=True)
    server.start()
    assert ready.wait(60), "the Wyoming services server did not start"

    wake = create_wake(cfg, hear_asr)  # the configured (portable: asr-match) wake engine on the real Whisper
    wake.load()
    speak = Speak(cfg, player=lambda c: RecordingPlayer(c), tts=lambda c: hear_voice, cue=False)
    speak.load()
    satellite = Satellite(cfg, WakeOnly(wake), speak)  # type: ignore[arg-type]
    mic = LiveMic()
    listening = threading.Thread(target=satellite.run, args=(mic,), name="satellite-mic", daemon=True)
    try:
        with home_ha(work / "ha") as ha:
            services = ha.add_wyoming("127.0.0.1", servers[0].port)
            ents = ha.wyoming_entities(services["entry_id"], 4)
            ha.set_pipeline(stt_engine=ents["stt"], stt_language="zh-CN", tts_engine=ents["tts"],
                            tts_language="zh-CN", tts_voice=None, conversation_language="zh-CN")
            satellite.start()
            listening.start()
            added = ha.add_wyoming("127.0.0.1", satellite.link.port)
            sat_ents = ha.wyoming_entities(added["entry_id"], 1)
            assert satellite.link.running.wait(30), f"HA did not run the satellite\n{ha.log()}"
            yield {"ha": ha, "satellite": satellite, "mic": mic, "speak": speak, "entities": sat_ents}
    finally:
        mic.close()
        satellite.close()
        listening.join(5)
        speak.close()
        stop.set()
        server.join(30)


def ask(home: dict[str, Any], voice: Any, text: str, timeout: float = 90.0) -> Any:
    """Say 小智小智 + ``text`` into the satellite; the run once HA's reply has played on the board."""
    satellite, ha = home["satellite"], home["ha"]
    before = len(satellite.link.runs)
    home["mic"].say(request(voice, text))
    ok = wait_until(lambda: len(satellite.link.runs) > before and (r := satellite.link.runs[-1]).over.is_set()
                    and r.reply is not None and r.reply.ended.is_set(), timeout)
    runs = satellite.link.runs[before:]
    assert ok, f"no reply played for {text!r}: wakes {[w.text for w in satellite.mic.wakes]}, runs " \
               f"{[(r.ended, r.transcript, r.error) for r in runs]}\n{ha.log()}"
    return runs[-1]


def test_a_spoken_request_through_the_satellite_turns_the_light_on(home, hear_voice):
    ha: HomeHa = home["ha"]
    assert ha.state(ha.light)["state"] == "off"
    run = ask(home, hear_voice, "打开大灯")  # the light's alias (Whisper base hears the voice's 客厅灯 as 客厅东)
    assert "大灯" in (run.transcript or ""), run.transcript
    ha.wait_state(ha.light, "on")
    assert run.reply.kind == "reply" and run.reply.audio_s > 0.3 and not run.reply.cut
    player = home["speak"].player.player
    assert player.samples / player.rate >= run.reply.audio_s - 0.05  # HA's reply played on the board's player


def test_a_timer_set_through_the_satellite_finishes_and_is_said_on_the_board(home, hear_voice):
    from rkvoice.satellite.timers import FINISHED_WORDS

    satellite = home["satellite"]
    run = ask(home, hear_voice, "设置定时十秒")  # zh-CN HassStartTimer: <timer_set> <timer> <timer_duration>
    assert "定时" in (run.transcript or ""), run.transcript  # (the voice's 计时器 is heard as 记时期, 定时 alone as 订时)
    assert wait_until(lambda: satellite.timers.ids(), 5), f"no timer-started from HA\n{home['ha'].log()}"
    started = time.monotonic()
    player = home["speak"].player.player
    before = player.samples
    assert wait_until(lambda: FINISHED_WORDS in "".join(satellite.playback.said), 30), home["ha"].log()
    assert 5.0 <= time.monotonic() - started <= 15.0  # HA's 10 s timer (its reply took some of it)
    assert wait_until(lambda: not satellite.playback.playing, 10)
    assert (player.samples - before) / player.rate > 0.5  # the board said it
    assert satellite.timers.ids() == []


def test_an_announcement_plays_on_the_board(home):
    ha: HomeHa = home["ha"]
    satellite = home["satellite"]
    entity = home["entities"]["assist_satellite"]
    before = len(satellite.playback.streams)
    t0 = time.monotonic()
    ha.rest("POST", "/api/services/assist_satellite/announce", {"entity_id": entity, "message": "晚饭做好了"})
    took = time.monotonic() - t0
    streams = satellite.playback.streams[before:]
    assert [s.kind for s in streams] == ["announce"], streams
    assert streams[0].ended.is_set() and streams[0].audio_s > 0.5
    assert took >= streams[0].audio_s - 0.1  # HA waited for ``played`` (sent once it had played)
