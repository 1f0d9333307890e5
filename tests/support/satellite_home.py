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
from dataclasses import dataclass, field, replace
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
    ``speech_end_at`` is the time.monotonic() the last loud sample said was heard (its frame's due time:
    a reader that was busy, as a wake engine deciding, takes the frames late, the room heard them then). ``open()`` gives a
    source of its own over the same queue (closing it leaves the microphone to the next one), as
    each call of the daemon's ``source(cfg)`` opens the device again."""

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
        return self._frames(self._closed)

    def _frames(self, closed: threading.Event) -> Iterator[np.ndarray]:
        t0, n = time.monotonic(), 0
        while not closed.is_set():
            n += 1
            due = t0 + n * FRAME / RATE
            if closed.wait(max(0.0, due - time.monotonic())):
                return  # (closed before taking the frame: the next source gets it)
            with self._lock:
                frame, last = self._queued.popleft() if self._queued else (np.zeros(FRAME, np.float32), False)
            if last:  # when a microphone hears it, however late its reader takes it
                self.speech_end_at = due
            yield frame

    def open(self) -> LiveSource:
        return LiveSource(self)

    def close(self) -> None:
        self._closed.set()


class LiveSource:
    """One opening of a LiveMic."""

    sample_rate = RATE

    def __init__(self, mic: LiveMic) -> None:
        self.mic = mic
        self._closed = threading.Event()

    def frames(self) -> Iterator[np.ndarray]:
        return self.mic._frames(self._closed)

    def close(self) -> None:
        self._closed.set()


class WakeOnly:
    """The hear stage as the satellite reads it: its wake engine, and (``heard``: the ASR) the ASR its stop
    word hears with (none: no stop word)."""

    def __init__(self, wake: Any, heard: Any = None) -> None:
        self.wake = wake
        self.heard = heard


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
    listener: Any = None
    """With ``local``: the daemon's SatelliteListener (the local loop answers while HA is away)."""
    reports: list[Any] = field(default_factory=list)
    """With ``local``: what the listeners reported (the local turns, failures)."""

    @property
    def player(self) -> Any:
        """The board's player (a RecordingPlayer inside the echo reference tap)."""
        return self.speak.player.player

    def ask(self, text: str, timeout: float = 90.0) -> Any:
        """Say 小智小智 + ``text``; the run once HA's reply has played on the board (AssertionError after ``timeout``)."""
        core = self.satellite.link.core  # (the runs of either link: Wyoming or ESPHome)
        before = len(core.runs)
        self.mic.say(request(self.voice, text))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = core.runs[-1] if len(core.runs) > before else None
            if run is not None and run.over.is_set() and run.reply is not None and run.reply.ended.is_set():
                return run
            time.sleep(0.02)
        runs = [(r.ended, r.transcript, r.error) for r in core.runs[before:]]
        raise AssertionError(f"no reply played for {text!r}: wakes {[w.text for w in self.satellite.mic.wakes]}, "
                             f"runs {runs}\n{self.ha.log()}")

    def ask_local(self, text: str, timeout: float = 60.0) -> Any:
        """With ``local``, HA away: say 小智小智 + ``text``; the local assistant's turn once it reported it
        (AssertionError after ``timeout``)."""
        before = len(self.reports)
        self.mic.say(request(self.voice, text))
        deadline = time.monotonic() + timeout
        while len(self.reports) <= before:
            assert time.monotonic() < deadline, f"no local answer to {text!r} while HA was away"
            time.sleep(0.02)
        return self.reports[before]


def home_config(ha: HomeHa, work: Path, **satellite: Any) -> Any:
    """The configuration of a satellite in ``work`` of ``ha``'s home (named rkvoice, area 客厅; ``satellite``:
    more satellite fields); home_assistant.url is HA's, so rkvoice-asr corrects the home's names."""
    from rkvoice.config import load_config

    base = load_config()
    return replace(base, satellite=replace(base.satellite, **{"uri": "tcp://127.0.0.1:0", "name": "rkvoice",
                                                              "area": "客厅", **satellite}),
                   home_assistant=replace(base.home_assistant, url=ha.base, token_file=str(ha.token_file)),
                   state=replace(base.state, dir=str(work / "state")))


@contextlib.contextmanager
def rkvoice_services(cfg: Any, work: Path, ha: HomeHa, asr: Any, voice: Any) -> Iterator[dict[str, str]]:
    """rkvoice's Wyoming services server on loopback (``asr``, ``voice``, the assistant), added to ``ha`` by
    its wyoming config flow, its speech-to-text and text-to-speech made the preferred pipeline's (zh-CN);
    yields the entry's {domain: entity_id} (stt, tts, wake_word, conversation: rkvoice-handle)."""
    from rkvoice.answer.assistant import Assistant
    from rkvoice.config import WyomingConfig
    from rkvoice.stages import wake_factory
    from rkvoice.state import StateStore
    from rkvoice.wyoming.engines import Engines
    from rkvoice.wyoming.server import serve_wyoming

    engines = Engines(asr=asr, tts=voice, assistant=Assistant(cfg, store=StateStore(work / "state")),
                      wake_factory=wake_factory(cfg))
    stop, ready, servers = threading.Event(), threading.Event(), []

    def on_ready(server: Any) -> None:
        servers.append(server)
        ready.set()

    server = threading.Thread(target=serve_wyoming, args=(replace(cfg, wyoming=WyomingConfig()), "tcp://127.0.0.1:0"),
                              kwargs={"engines": engines, "stop": stop, "ready": on_ready}, daemon=True)
    server.start()
    try:
        assert ready.wait(60), "the Wyoming services server did not start"
        services = ha.add_wyoming("127.0.0.1", servers[0].port)
        ents = ha.wyoming_entities(services["entry_id"], 4)
        ha.set_pipeline(stt_engine=ents["stt"], stt_language="zh-CN", tts_engine=ents["tts"],
                        tts_language="zh-CN", tts_voice=None, conversation_language="zh-CN")
        yield ents
    finally:
        stop.set()
        server.join(30)
        if engines.assistant.home is not None:
            engines.assistant.home.close()


def board(cfg: Any, asr: Any, voice: Any, player: Any = None) -> tuple[Any, Any]:
    """The board's loaded wake engine (the configured one, portable: asr-match on ``asr``) and Speak
    (``voice``; ``player`` makes its player, default a RecordingPlayer, real-time paced)."""
    from rkvoice.hear.wake_registry import create_wake
    from rkvoice.stages import Speak
    from tests.fakes import RecordingPlayer

    wake = create_wake(cfg, asr)
    wake.load()
    speak = Speak(cfg, player=player or (lambda c: RecordingPlayer(c)), tts=lambda c: voice, cue=False)
    speak.load()
    return wake, speak


@contextlib.contextmanager
def satellite_home(work: Path, asr: Any, voice: Any, player: Any = None, ha: HomeHa | None = None,
                   board_vad: bool = True, local: bool = False) -> Iterator[SatelliteHome]:
    """HA (``ha``, else one started here with ``home_ha``) with rkvoice's services in its preferred pipeline
    (``rkvoice_services``) and the satellite added and running on ``asr`` (loaded; the wake engine
    transcribes with it) and ``voice`` (loaded TtsEngine). ``player`` makes the board's player (default: a
    RecordingPlayer, real-time paced). ``board_vad``: the satellite ends requests with the board's VAD too
    (as the product does), else HA's VAD alone. ``local``: the satellite as the daemon runs it
    (SatelliteListener), the local loop answering (tools; a scripted LLM) while HA is not connected."""
    from rkvoice.satellite.run import Satellite, board_vad as make_vad

    with contextlib.ExitStack() as started:
        if ha is None:
            ha = started.enter_context(home_ha(work / "ha"))
        cfg = home_config(ha, work)
        started.enter_context(rkvoice_services(cfg, work, ha, asr, voice))
        wake, speak = board(cfg, asr, voice, player)
        mic = LiveMic()
        listener: Any = None
        reports: list[Any] = []
        if not local:
            satellite = Satellite(cfg, WakeOnly(wake), speak, segmenter=make_vad(cfg) if board_vad else None)
            listening = threading.Thread(target=satellite.run, args=(mic,), name="satellite-mic", daemon=True)
        try:
            if local:
                listener = local_listener(cfg, work, asr, wake, speak, mic, reports)
                satellite = listener.satellite
                listening = threading.Thread(target=listener.run, name="satellite-listener", daemon=True)
            else:
                satellite.start()
            listening.start()
            added = ha.add_wyoming("127.0.0.1", satellite.link.port)
            sat_ents = ha.wyoming_entities(added["entry_id"], 1)
            assert satellite.link.running.wait(30), f"HA did not run the satellite\n{ha.log()}"
            yield SatelliteHome(ha, satellite, mic, speak, voice, asr, sat_ents, listener, reports)
        finally:
            stop_board(mic, listener or satellite, listening, speak)


def stop_board(mic: LiveMic, running: Any, listening: threading.Thread, speak: Any) -> None:
    """The end of a harness's board: its microphone, the satellite (or the listener ``running`` it), the
    thread listening, the speaker."""
    mic.close()
    running.close()
    listening.join(5)
    speak.close()


def local_listener(cfg: Any, work: Path, asr: Any, wake: Any, speak: Any, mic: LiveMic, reports: list[Any]) -> Any:
    """The daemon's SatelliteListener over these engines; its local loop answers with the tools (and a
    scripted LLM) while HA is away; both report into ``reports``."""
    from rkvoice.answer.assistant import Assistant
    from rkvoice.daemon.listener import LocalListener
    from rkvoice.esphome import link_for
    from rkvoice.satellite.run import SatelliteListener, board_vad
    from rkvoice.stages import Hear, Stages
    from rkvoice.state import StateStore
    from tests.fakes import ScriptedLlm

    hear = Hear(cfg)
    hear.asr, hear.heard, hear.wake, hear.segmenter = asr, asr, wake, board_vad(cfg)  # heard: the stop word's ASR
    stages = Stages(hear, Assistant(cfg, llm=ScriptedLlm(), store=StateStore(work / "local")), speak)

    def busy(_what: str) -> Any:
        return contextlib.nullcontext()

    def source(_cfg: Any) -> LiveSource:
        return mic.open()

    def local(gate: Any) -> LocalListener:
        return LocalListener(stages, cfg, reports.append, busy, source, answer_gate=gate)

    return SatelliteListener(stages, cfg, reports.append, busy, source, local=local, link=link_for(cfg))
