"""rkvoice as the satellite of a real Home Assistant (tests/ha_home.py), for tests/test_satellite_e2e.py and
bench/satellite_latency.py: HA's wyoming config flow adds rkvoice's Wyoming services server (speech-to-text
and text-to-speech of HA's preferred pipeline; HA's own agent answers) and the satellite, whose microphone
(``LiveMic``) hears what the test says into it in real time and whose wake engine is the configured one on
the real ASR.

    with satellite_home(work, asr, voice) as home:   # HA started, both added, the satellite running
        run = home.ask("打开大灯")                      # said after 小智小智 + a pause; the run once its reply played
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tests.ha_home import HomeHa, home_ha

RATE = 16000
FRAME = 512
PAUSE_S = 1.0
"""Silence between the wake phrase and the request (the wake is decided during it)."""


class LiveMic:
    """A microphone in real time: what ``say()`` queued, else silence, one frame every 32 ms.
    ``speech_end_at`` is the time.monotonic() the last loud sample said was heard."""

    sample_rate = RATE

    def __init__(self) -> None:
        self._queued: deque[tuple[np.ndarray, bool]] = deque()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.speech_end_at: float | None = None

    def say(self, audio: np.ndarray) -> None:
        audio = np.asarray(audio, np.float32)
        last = int(np.flatnonzero(np.abs(audio) > 1e-3)[-1]) // FRAME
        padded = np.concatenate([audio, np.zeros(-len(audio) % FRAME, np.float32)]).reshape(-1, FRAME)
        with self._lock:
            self.speech_end_at = None
            self._queued.extend((frame, i == last) for i, frame in enumerate(padded))

    def frames(self) -> Iterator[np.ndarray]:
        t0, n = time.monotonic(), 0
        while not self._closed.is_set():
            with self._lock:
                frame, last = self._queued.popleft() if self._queued else (np.zeros(FRAME, np.float32), False)
            n += 1
            if self._closed.wait(max(0.0, t0 + n * FRAME / RATE - time.monotonic())):
                return
            if last:
                self.speech_end_at = time.monotonic()
            yield frame

    def close(self) -> None:
        self._closed.set()


class WakeOnly:
    """The hear stage as the satellite reads it: its wake engine."""

    def __init__(self, wake: Any) -> None:
        self.wake = wake


def spoken(voice: Any, text: str) -> np.ndarray:
    """``text`` said by ``voice``, at 16 kHz, its own silence trimmed."""
    import soxr

    audio, rate = voice.generate(text)
    audio = soxr.resample(np.asarray(audio, np.float32), rate, RATE).astype(np.float32)
    loud = np.flatnonzero(np.abs(audio) > 1e-3)
    return audio[loud[0] : loud[-1] + 1]


def request(voice: Any, text: str) -> np.ndarray:
    """小智小智, a pause, the request, a second of silence."""
    pause, tail = np.zeros(int(PAUSE_S * RATE), np.float32), np.zeros(RATE, np.float32)
    return np.concatenate([spoken(voice, "小智小智"), pause, spoken(voice, text), tail])


@dataclass
class SatelliteHome:
    ha: HomeHa
    satellite: Any
    """rkvoice.satellite.run.Satellite"""
    mic: LiveMic
    speak: Any
    voice: Any
    asr: Any
    entities: dict[str, str]
    """The satellite entry's {domain: entity_id} (assist_satellite, ...)."""

    @property
    def player(self) -> Any:
        """The board's player (a RecordingPlayer inside the echo reference tap)."""
        return self.speak.player.player

    def ask(self, text: str, timeout: float = 90.0) -> Any:
        """Say 小智小智 + ``text``; the run once HA's reply has played on the board (AssertionError after ``timeout``)."""
        link = self.satellite.link
        before = len(link.runs)
        self.mic.say(request(self.voice, text))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = link.runs[-1] if len(link.runs) > before else None
            if run is not None and run.over.is_set() and run.reply is not None and run.reply.ended.is_set():
                return run
            time.sleep(0.02)
        runs = [(r.ended, r.transcript, r.error) for r in link.runs[before:]]
        raise AssertionError(f"no reply played for {text!r}: wakes {[w.text for w in self.satellite.mic.wakes]}, "
                             f"runs {runs}\n{self.ha.log()}")


@contextlib.contextmanager
def satellite_home(work: Path, asr: Any, voice: Any, player: Any = None, ha: HomeHa | None = None,
                   board_vad: bool = True) -> Iterator[SatelliteHome]:
    """HA (``ha``, else one started here with ``home_ha``) with rkvoice's services in its preferred pipeline
    and the satellite added and running on ``asr`` (loaded; the wake engine transcribes with it) and
    ``voice`` (loaded TtsEngine); rkvoice-asr corrects the home's names (home_assistant.url is HA's).
    ``player`` makes the board's player (default: a RecordingPlayer,
    real-time paced). ``board_vad``: the satellite ends requests with the board's VAD too (as the product
    does), else HA's VAD alone."""
    from rkvoice.answer.assistant import Assistant
    from rkvoice.config import WyomingConfig, load_config
    from rkvoice.hear.wake_registry import create_wake
    from rkvoice.satellite.run import Satellite, board_vad as make_vad
    from rkvoice.stages import Speak, wake_factory
    from rkvoice.state import StateStore
    from rkvoice.wyoming.engines import Engines
    from rkvoice.wyoming.server import serve_wyoming
    from tests.fakes import RecordingPlayer

    with contextlib.ExitStack() as started:
        if ha is None:
            ha = started.enter_context(home_ha(work / "ha"))
        base = load_config()
        cfg = replace(base, satellite=replace(base.satellite, uri="tcp://127.0.0.1:0", name="rkvoice", area="客厅"),
                      home_assistant=replace(base.home_assistant, url=ha.base, token_file=str(ha.token_file)),
                      state=replace(base.state, dir=str(work / "state")))  # the home's names: rkvoice-asr corrects
        engines = Engines(asr=asr, tts=voice, assistant=Assistant(cfg, store=StateStore(work / "state")),
                          wake_factory=wake_factory(cfg))
        stop, ready, servers = threading.Event(), threading.Event(), []

        def on_ready(server: Any) -> None:
            servers.append(server)
            ready.set()

        server = threading.Thread(target=serve_wyoming, args=(replace(cfg, wyoming=WyomingConfig()),
                                                              "tcp://127.0.0.1:0"),
                                  kwargs={"engines": engines, "stop": stop, "ready": on_ready}, daemon=True)
        server.start()
        assert ready.wait(60), "the Wyoming services server did not start"
        wake = create_wake(cfg, asr)  # the configured (portable: asr-match) wake engine on the real ASR
        wake.load()
        speak = Speak(cfg, player=player or (lambda c: RecordingPlayer(c)), tts=lambda c: voice, cue=False)
        speak.load()
        satellite = Satellite(cfg, WakeOnly(wake), speak, segmenter=make_vad(cfg) if board_vad else None)
        mic = LiveMic()
        listening = threading.Thread(target=satellite.run, args=(mic,), name="satellite-mic", daemon=True)
        try:
            services = ha.add_wyoming("127.0.0.1", servers[0].port)
            ents = ha.wyoming_entities(services["entry_id"], 4)
            ha.set_pipeline(stt_engine=ents["stt"], stt_language="zh-CN", tts_engine=ents["tts"],
                            tts_language="zh-CN", tts_voice=None, conversation_language="zh-CN")
            satellite.start()
            listening.start()
            added = ha.add_wyoming("127.0.0.1", satellite.link.port)
            sat_ents = ha.wyoming_entities(added["entry_id"], 1)
            assert satellite.link.running.wait(30), f"HA did not run the satellite\n{ha.log()}"
            yield SatelliteHome(ha, satellite, mic, speak, voice, asr, sat_ents)
        finally:
            mic.close()
            satellite.close()
            listening.join(5)
            speak.close()
            stop.set()
            server.join(30)
            if engines.assistant.home is not None:
                engines.assistant.home.close()
