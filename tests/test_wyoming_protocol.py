"""The Wyoming protocol as Home Assistant speaks it, on a real server over scripted engines (no models):
the plain ``handled`` after a streamed answer, language variants, audio chunks of any byte length,
streamed synthesis (quiet text, the voice from the first text), the answers' time zone, and a
server one client cannot take down (idle limits in every state, ``describe`` past ``max_clients``,
work of a client that left cancelled, fields of the wrong type)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

pytest.importorskip("wyoming", reason="wyoming is not installed (requirements/portable.txt)")

from wyoming.asr import Transcribe, Transcript  # noqa: E402
from wyoming.audio import AudioChunk, AudioStart, AudioStop  # noqa: E402
from wyoming.client import AsyncTcpClient  # noqa: E402
from wyoming.error import Error  # noqa: E402
from wyoming.event import Event, async_read_event  # noqa: E402
from wyoming.handle import Handled, HandledChunk, NotHandled  # noqa: E402
from wyoming.info import Describe, Info  # noqa: E402
from wyoming.ping import Ping  # noqa: E402
from wyoming.tts import (  # noqa: E402
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from rkvoice.answer.llm.base import LlmEngine  # noqa: E402
from rkvoice.config import WyomingConfig, load_config  # noqa: E402
from rkvoice.errors import RkvoiceError  # noqa: E402
from rkvoice.tts.registry import VoiceSpec  # noqa: E402
from rkvoice.turn import Turn  # noqa: E402
from rkvoice.wyoming.engines import Engines  # noqa: E402
from rkvoice.wyoming.server import serve_wyoming  # noqa: E402

BOUND = 30.0
"""Upper bound for one exchange: a test that hits it has failed (nothing here waits for wall time)."""
ANSWER = ["月亮是", "地球唯一的", "天然卫星。"]


class FakeAsr:
    """Transcribes to 你好 and records the sample count of each call; ``hold`` blocks calls while clear."""

    name = "whisper"
    languages = ("zh",)

    def __init__(self) -> None:
        self.text = "你好"
        self.calls: list[int] = []
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()

    def transcribe(self, samples: np.ndarray) -> str:
        self.entered.set()
        assert self.hold.wait(BOUND)
        self.calls.append(len(samples))
        return self.text


class FakeVoice:
    """0.1 s of a quiet tone per character; records the texts it was given."""

    sample_rate = 16000

    def __init__(self, name: str, languages: tuple[str, ...] = ("zh",)) -> None:
        self.name = name
        self.languages = languages
        self.texts: list[str] = []

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        self.texts.append(text)
        t = np.arange(1600 * max(1, len(text))) / 16000
        return (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000


class FakeLlm(LlmEngine):
    """Streams ANSWER, each piece after ``go`` is released (``free=True``: at once); ``fail`` raises after
    the first piece; ``aborted`` is set when the stream is aborted."""

    name = "scripted"

    def __init__(self) -> None:
        self.go = threading.Semaphore(0)
        self.free = True
        self.fail = False
        self.started = threading.Event()
        self.aborted = threading.Event()

    def load(self) -> None:
        pass

    def stream(self, messages: list[dict[str, str]]) -> Iterator[str]:
        self.started.set()
        for i, piece in enumerate(ANSWER):
            while not self.free and not self.go.acquire(timeout=0.05):
                if self.aborted.is_set():
                    return
            if self.fail and i == 1:
                raise RuntimeError("the model fell over")
            yield piece

    def abort(self) -> None:
        self.aborted.set()


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """Scripted engines, a real Assistant (tools, then the scripted LLM) and the voices fastspeech2 (zh)
    and piper-joe (en), whatever is installed."""
    from rkvoice.answer.assistant import Assistant
    from rkvoice.state import StateStore

    specs = {"fastspeech2": VoiceSpec("fastspeech2", "fastspeech2", (), ("zh",)),
             "piper-joe": VoiceSpec("piper-joe", "vits", (("voice", "piper-joe"),), ("en",))}
    monkeypatch.setattr("rkvoice.wyoming.tts.installed_voices", lambda cfg: dict(specs))
    llm = FakeLlm()
    zh, en = FakeVoice("fastspeech2"), FakeVoice("piper-joe", ("en",))
    engines = Engines(asr=FakeAsr(), tts=zh, assistant=Assistant(load_config(), llm=llm,
                                                                 store=StateStore(tmp_path / "state")),
                      wake_factory=lambda asr: None, voices={"piper-joe": en})
    return engines, llm, zh, en


@contextmanager
def serving(engines: Engines, settings: WyomingConfig | None = None) -> Iterator[int]:
    stop, ready, started = threading.Event(), threading.Event(), []

    def on_ready(server: Any) -> None:
        started.append(server)
        ready.set()

    cfg = replace(load_config(), wyoming=settings or WyomingConfig())
    thread = threading.Thread(target=serve_wyoming, args=(cfg, "tcp://127.0.0.1:0"), daemon=True,
                              kwargs={"engines": engines, "stop": stop, "ready": on_ready})
    thread.start()
    assert ready.wait(BOUND), "the server did not start"
    try:
        yield started[0].port
    finally:
        stop.set()
        thread.join(BOUND)


def run(coro: Any) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, BOUND)

    return asyncio.run(bounded())


async def read_until(c: AsyncTcpClient, done: Callable[[Event], bool]) -> list[Event]:
    out: list[Event] = []
    while True:
        event = await c.read_event()
        assert event is not None, f"connection closed after {[e.type for e in out]}"
        out.append(event)
        if done(event):
            return out


async def until_closed(reader: asyncio.StreamReader) -> list[Event]:
    """Every event up to the server closing the connection."""
    out: list[Event] = []
    while (event := await async_read_event(reader)) is not None:
        out.append(event)
    return out


def pcm(seconds: float, rate: int = 16000, channels: int = 1) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    x = (0.2 * np.sin(2 * np.pi * 200 * t) * 32767).astype("<i2")
    return np.repeat(x, channels).tobytes()


# -- answers ---------------------------------------------------------------------------------------


def ask(port: int, text: str) -> list[Event]:
    async def go() -> list[Event]:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Transcript(text=text).event())
            return await read_until(c, lambda e: e.type in ("handled", "not-handled"))

    return list(run(go()))


def test_a_streamed_llm_answer_ends_with_handled_and_the_whole_text(fakes):
    engines, *_ = fakes
    with serving(engines) as port:
        events = ask(port, "用一句话介绍一下月亮")
    types = [e.type for e in events]
    assert types[0] == "handled-start" and types[-2:] == ["handled-stop", "handled"]
    assert "".join(HandledChunk.from_event(e).text for e in events if e.type == "handled-chunk") == "".join(ANSWER)
    assert Handled.from_event(events[-1]).text == "".join(ANSWER)


def test_a_tool_answer_is_one_handled(fakes):
    engines, *_ = fakes
    with serving(engines) as port:
        events = ask(port, "现在几点")
    assert [e.type for e in events] == ["handled"] and "点" in (Handled.from_event(events[0]).text or "")


def test_a_failed_llm_answer_is_not_handled(fakes):
    engines, llm, *_ = fakes
    llm.fail = True
    with serving(engines) as port:
        events = ask(port, "用一句话介绍一下月亮")
    types = [e.type for e in events]
    assert types[-1] == "not-handled" and "handled" not in types
    assert types[-2] == "handled-stop"  # the stream a streaming client follows is closed first
    assert "fell over" in (NotHandled.from_event(events[-1]).text or "")


# -- languages ----------------------------------------------------------------------------------------


def describe(port: int) -> Info:
    async def go() -> Info:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Describe().event())
            return Info.from_event((await read_until(c, lambda e: Info.is_type(e.type)))[-1])

    return run(go())


def test_languages_are_announced_with_region_and_script_variants(fakes):
    engines, *_ = fakes
    with serving(engines) as port:
        info = describe(port)
    for langs in (info.asr[0].models[0].languages, info.handle[0].models[0].languages):
        assert {"zh", "zh-CN", "zh-Hans", "zh-TW"} <= set(langs) and not any(x.startswith("en") for x in langs)
    voices = {v.name: set(v.languages) for v in info.tts[0].voices}
    assert {"zh", "zh-CN", "zh-Hans"} <= voices["fastspeech2"]
    assert {"en", "en-US", "en-GB"} <= voices["piper-joe"] and not any(x.startswith("zh") for x in voices["piper-joe"])


def transcribe(port: int, language: str | None, audio: bytes, chunks: list[int] | None = None, rate: int = 16000,
               channels: int = 1) -> list[Event]:
    """transcribe + the audio in chunks of the given byte lengths (cycled); the events up to the
    transcript or an error."""

    async def go() -> list[Event]:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Transcribe(language=language).event())
            await c.write_event(AudioStart(rate=rate, width=2, channels=channels).event())
            i, k = 0, 0
            sizes = chunks or [3200]
            while i < len(audio):
                n = sizes[k % len(sizes)]
                await c.write_event(AudioChunk(rate=rate, width=2, channels=channels, audio=audio[i:i + n]).event())
                i, k = i + n, k + 1
            await c.write_event(AudioStop().event())
            return await read_until(c, lambda e: e.type in ("transcript", "error"))

    return list(run(go()))


@pytest.mark.parametrize("language", ["zh", "zh-CN", "zh_CN", "zh-Hans", "ZH-tw", None])
def test_transcription_accepts_any_region_or_script_of_chinese(fakes, language):
    engines, *_ = fakes
    with serving(engines) as port:
        events = transcribe(port, language, pcm(0.5))
    transcript = Transcript.from_event(events[-1])
    assert transcript.text == "你好" and transcript.language == (language or "zh")


@pytest.mark.parametrize(("heard", "sent"), [("小智小智，打开客厅灯。", "打开客厅灯。"), ("小智小智把空调调到26度", "把空调调到26度"),
                                             ("小智小智。", "小智小智。"), ("打开小智的灯", "打开小智的灯")])
def test_a_wake_phrase_in_front_of_a_request_is_taken_off_the_transcript(fakes, heard, sent):
    # a satellite that woke on its own microphone sends a one-breath request with the phrase in it
    engines, *_ = fakes
    engines.asr.text = heard
    with serving(engines) as port:
        events = transcribe(port, "zh-CN", pcm(0.5))
    assert Transcript.from_event(events[-1]).text == sent


def test_transcription_in_a_language_not_served_is_an_error(fakes):
    engines, asr, *_ = fakes[0], fakes[0].asr
    with serving(engines) as port:
        events = transcribe(port, "en-US", pcm(0.5))
    assert Error.from_event(events[-1]).code == "unknown-language" and asr.calls == []


def test_a_voice_is_found_by_any_variant_of_its_language(fakes):
    engines, _, zh, en = fakes

    async def go(port: int, language: str, text: str) -> list[str]:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Synthesize(text=text, voice=SynthesizeVoice(language=language)).event())
            return [e.type for e in await read_until(c, lambda e: e.type in ("audio-stop", "error"))]

    with serving(engines) as port:
        assert run(go(port, "en-GB", "Good morning."))[-1] == "audio-stop"
        assert run(go(port, "zh-Hans", "早上好。"))[-1] == "audio-stop"
    assert " ".join(en.texts).split() == ["Good", "morning."] and zh.texts == ["早上好。"]


# -- audio of any chunking -----------------------------------------------------------------------------


def test_audio_chunks_of_odd_byte_lengths_are_transcribed_whole(fakes):
    engines, *_ = fakes
    asr = engines.asr
    audio = pcm(1.0)
    with serving(engines) as port:
        events = transcribe(port, "zh-CN", audio, chunks=[1, 3, 333, 1001, 4097])  # as HA's REST STT cuts them
        assert Transcript.is_type(events[-1].type), events[-1]
        stereo = pcm(1.0, rate=44100, channels=2)
        events = transcribe(port, "zh", stereo, chunks=[4095, 7], rate=44100, channels=2)
        assert Transcript.is_type(events[-1].type), events[-1]
    assert asr.calls[0] == 16000  # every sample, none lost at a chunk edge
    assert abs(asr.calls[1] - 16000) <= 2


def test_a_stream_that_ends_inside_a_frame_is_an_error_and_no_transcript(fakes):
    engines, *_ = fakes
    with serving(engines) as port:
        events = transcribe(port, "zh", pcm(0.5) + b"\x01")
    assert [e.type for e in events] == ["error"] and Error.from_event(events[0]).code == "bad-audio-chunk"
    assert engines.asr.calls == []


def test_a_bad_audio_format_gets_its_error_and_no_empty_transcript(fakes):
    engines, *_ = fakes

    async def go(port: int) -> list[Event]:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Transcribe(language="zh").event())
            await c.write_event(AudioStart(rate=3, width=7, channels=1).event())
            await c.write_event(AudioChunk(rate=3, width=7, channels=1, audio=b"\0" * 70).event())
            await c.write_event(AudioStop().event())
            await c.write_event(Ping(text="after").event())
            return await read_until(c, lambda e: e.type == "pong")

    with serving(engines) as port:
        events = run(go(port))
    assert [e.type for e in events] == ["error", "pong"] and Error.from_event(events[0]).code == "bad-audio-format"
    assert engines.asr.calls == []


# -- streamed synthesis ----------------------------------------------------------------------------------


def test_a_complete_first_clause_is_spoken_once_the_text_goes_quiet(fakes):
    engines, _, zh, _ = fakes

    async def go(port: int) -> list[str]:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(SynthesizeStart().event())
            await c.write_event(SynthesizeChunk(text="今天的天气很好，").event())
            # nothing more is sent until audio arrives: the clause must go out on its own
            first = await read_until(c, lambda e: AudioChunk.is_type(e.type))
            await c.write_event(SynthesizeChunk(text="我们出去走走吧。").event())
            await c.write_event(SynthesizeStop().event())
            rest = await read_until(c, lambda e: SynthesizeStopped.is_type(e.type))
        return [e.type for e in first + rest]

    with serving(engines) as port:
        types = run(go(port))
    assert zh.texts[0] == "今天的天气很好，"
    assert "".join(zh.texts) == "今天的天气很好，我们出去走走吧。"
    assert types.count("audio-start") == 1 and types[-2:] == ["audio-stop", "synthesize-stopped"]


def test_a_streamed_synthesis_without_a_voice_takes_the_voice_of_its_first_text(fakes):
    engines, _, zh, en = fakes

    async def go(port: int, parts: list[str]) -> int:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(SynthesizeStart().event())
            for part in parts:
                await c.write_event(SynthesizeChunk(text=part).event())
            await c.write_event(SynthesizeStop().event())
            events = await read_until(c, lambda e: SynthesizeStopped.is_type(e.type))
        return AudioStart.from_event(next(e for e in events if AudioStart.is_type(e.type))).rate

    with serving(engines) as port:
        run(go(port, ["", " ", "The weather is nice today. ", "Let's go for a walk."]))
        assert " ".join(en.texts).split() == "The weather is nice today. Let's go for a walk.".split() and zh.texts == []
        run(go(port, ["今天天气不错。"]))
    assert zh.texts == ["今天天气不错。"]


class StreamingVoice(FakeVoice):
    """A voice that streams (as the Piper voice): each piece in three parts of 0.5 s; the second part
    is made only once ``go`` is set."""

    streaming = True

    def __init__(self) -> None:
        super().__init__("piper-zh")
        self.go = threading.Event()
        self.parts = 0

    def stream(self, text: str, sid: int = 0, speed: float = 1.0) -> Iterator[tuple[np.ndarray, bool]]:
        for i in range(3):
            if i == 1:
                assert self.go.wait(BOUND)
            self.parts += 1
            yield (0.1 * np.sin(np.arange(8000) * 0.3)).astype(np.float32), i == 2


def test_a_streaming_voice_is_streamed_to_the_client_part_by_part(fakes):
    """The Wyoming synthesis streams a voice that streams: the first part's audio reaches the client
    while the rest of the piece is still to be made (before, the server's gated call turned it off)."""
    engines, *_ = fakes
    voice = StreamingVoice()
    engines = replace(engines, tts=voice, voices={})

    async def go(port: int) -> tuple[list[str], list[str]]:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Synthesize(text="早上好。").event())
            first = [e.type for e in await read_until(c, lambda e: e.type == "audio-chunk")]
            made = voice.parts
            voice.go.set()
            rest = [e.type for e in await read_until(c, lambda e: e.type == "audio-stop")]
            return first + [f"parts made: {made}"], rest

    with serving(engines) as port:
        first, rest = run(go(port))
    assert first == ["audio-start", "audio-chunk", "parts made: 1"]
    assert rest[-1] == "audio-stop" and voice.parts == 3 and voice.texts == []  # stream(), never generate()


def test_a_named_voice_is_checked_at_synthesize_start(fakes):
    engines, *_ = fakes

    async def go(port: int) -> Event:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(SynthesizeStart(voice=SynthesizeVoice(name="nobody")).event())
            return (await read_until(c, lambda e: e.type == "error"))[-1]

    with serving(engines) as port:
        assert Error.from_event(run(go(port))).code == "unknown-voice"


# -- the answers' time zone ------------------------------------------------------------------------------


def test_the_answers_clock_follows_the_configured_time_zone():
    from rkvoice.stages import assistant

    def clock(time_zone: str) -> Any:
        return assistant(load_config(), time_zone=time_zone).now

    assert clock("Asia/Shanghai")().utcoffset() == timedelta(hours=8)
    assert clock("America/Sao_Paulo")().utcoffset() == timedelta(hours=-3)
    assert clock("")().utcoffset() == clock("")().astimezone().utcoffset()  # the system's
    assert load_config([{"wyoming": {"time_zone": "Asia/Shanghai"}}]).wyoming.time_zone == "Asia/Shanghai"
    with pytest.raises(RkvoiceError, match="wyoming.time_zone 'Mars/Olympus'"):
        load_config([{"wyoming": {"time_zone": "Mars/Olympus"}}])


def test_the_server_loads_its_assistant_on_the_configured_time_zone(fakes, monkeypatch):
    """serve_wyoming without engines builds its stages with the wyoming.time_zone of its settings."""
    from types import SimpleNamespace

    from rkvoice.stages import StageSpecs, answer_spec, hear_spec, speak_spec
    from rkvoice.wyoming import server

    engines, *_ = fakes
    asked: list[str] = []

    def stages(time_zone: str) -> StageSpecs:
        asked.append(time_zone)
        idle = {"load": lambda: None, "close": lambda: None}
        hear = SimpleNamespace(asr=engines.asr, gate=engines.asr_gate, **idle)
        speak = SimpleNamespace(tts=engines.tts, gate=engines.tts_gate, **idle)
        return StageSpecs(hear_spec(lambda c: hear), answer_spec(lambda c: SimpleNamespace(**idle)),
                          speak_spec(lambda c: speak))

    monkeypatch.setattr(server, "serving_stages", stages)
    stop, ready = threading.Event(), threading.Event()
    cfg = replace(load_config(), wyoming=WyomingConfig(time_zone="Asia/Shanghai"))
    thread = threading.Thread(target=serve_wyoming, args=(cfg, "tcp://127.0.0.1:0"), daemon=True,
                              kwargs={"stop": stop, "ready": lambda s: ready.set()})
    thread.start()
    assert ready.wait(BOUND)
    stop.set()
    thread.join(BOUND)
    assert asked == ["Asia/Shanghai"]


def test_the_time_tool_answers_in_the_zone_it_is_given(tmp_path):
    from datetime import UTC, datetime, timezone

    from rkvoice.answer.assistant import Assistant
    from rkvoice.state import StateStore

    fixed = datetime(2026, 12, 2, 5, 30, tzinfo=UTC)
    shanghai = Assistant(load_config(), now=lambda: fixed.astimezone(timezone(timedelta(hours=8))),
                         store=StateStore(tmp_path / "a"))
    utc = Assistant(load_config(), now=lambda: fixed, store=StateStore(tmp_path / "b"))
    at_shanghai = "".join(shanghai.reply("现在几点", Turn()).deltas)
    at_utc = "".join(utc.reply("现在几点", Turn()).deltas)
    assert at_shanghai != at_utc and "一点" in at_shanghai and "五点" in at_utc


# -- a server one client cannot take down ---------------------------------------------------------------


def test_a_streamed_synthesis_that_receives_nothing_is_closed_by_the_idle_limit(fakes):
    engines, *_ = fakes

    async def go(port: int) -> list[Event]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b'{"type": "synthesize-start"}\n')
        await writer.drain()
        events = await until_closed(reader)
        writer.close()
        return events

    with request_lines() as lines, serving(engines, WyomingConfig(idle_timeout_s=0.5)) as port:
        events = run(go(port))
        line = lines.wait(1)[0]
    assert [Error.from_event(e).code for e in events if Error.is_type(e.type)] == ["idle"]
    assert "streamed synthesis" in Error.from_event(events[-1]).text
    assert " streamed synthesis '': total_ms=" in line and line.endswith(" cancelled (idle)"), line


def test_describe_is_answered_while_max_clients_connections_are_held(fakes):
    engines, *_ = fakes

    async def go(port: int) -> tuple[Info, list[Event], list[str]]:
        held = []
        for _ in range(3):
            c = AsyncTcpClient("127.0.0.1", port)
            await c.connect()
            await c.write_event(SynthesizeStart().event())  # one state idle used to skip
            await c.write_event(Ping().event())
            await read_until(c, lambda e: e.type == "pong")  # the server counts this connection
            held.append(c)
        async with AsyncTcpClient("127.0.0.1", port) as fresh:  # one over the limit
            await fresh.write_event(Describe().event())
            info = Info.from_event((await read_until(fresh, lambda e: Info.is_type(e.type)))[-1])
            after = await fresh.read_event()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b'{"type": "transcribe"}\n')
        await writer.drain()
        refused = await until_closed(reader)
        writer.close()
        closed = []
        for c in held:  # and the held ones are closed by the idle limit
            last = None
            while (event := await c.read_event()) is not None:
                last = event
            closed.append(Error.from_event(last).code if last is not None and Error.is_type(last.type) else "")
            await c.disconnect()
        return info, refused, closed if after is None else ["still open"]

    with serving(engines, WyomingConfig(max_clients=3, idle_timeout_s=3.0)) as port:
        info, refused, closed = run(go(port))
    assert info.asr and info.tts
    assert [Error.from_event(e).code for e in refused] == ["busy"]
    assert closed == ["idle", "idle", "idle"]


def test_a_connection_over_the_limit_closes_an_idle_one_and_is_served(fakes, monkeypatch):
    from rkvoice.wyoming import handler

    monkeypatch.setattr(handler, "EVICT_IDLE_S", 0.0)  # any connection waiting with nothing in progress
    engines, *_ = fakes

    async def go(port: int) -> tuple[list[Event], list[str]]:
        held = []
        for _ in range(2):
            c = AsyncTcpClient("127.0.0.1", port)
            await c.connect()
            await c.write_event(Ping().event())
            await read_until(c, lambda e: e.type == "pong")
            held.append(c)
        async with AsyncTcpClient("127.0.0.1", port) as fresh:  # over the limit, with a real request
            await fresh.write_event(Transcribe(language="zh").event())
            await fresh.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            await fresh.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm(0.5)).event())
            await fresh.write_event(AudioStop().event())
            got = await read_until(fresh, lambda e: e.type in ("transcript", "error"))
        reads = {asyncio.ensure_future(c.read_event()): c for c in held}  # one was closed to make way
        done, waiting = await asyncio.wait(reads, return_when=asyncio.FIRST_COMPLETED)
        fates = []
        for read in done:
            event = read.result()
            assert event is not None and Error.is_type(event.type), event
            fates.append(Error.from_event(event).code)
            assert await reads[read].read_event() is None  # and closed
        for read in waiting:  # the other is still served
            await reads[read].write_event(Ping().event())
            event = await read
            fates.append(event.type if event is not None else "closed")
        for c in held:
            await c.disconnect()
        return got, fates

    with serving(engines, WyomingConfig(max_clients=2)) as port:
        got, fates = run(go(port))
    assert Transcript.from_event(got[-1]).text == "你好"
    assert fates == ["evicted", "pong"]  # one idle connection went, the other is still served


def test_a_transcription_of_a_client_that_left_never_runs(fakes):
    engines, *_ = fakes
    asr = engines.asr
    left = threading.Event()

    class Left(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if " left; its " in record.getMessage():
                left.set()

    async def audio(c: AsyncTcpClient, seconds: float) -> None:
        await c.write_event(Transcribe().event())
        await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm(seconds)).event())
        await c.write_event(AudioStop().event())

    async def first(port: int) -> None:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await audio(c, 0.25)
            await read_until(c, lambda e: e.type == "transcript")

    async def go(port: int) -> None:
        holder = asyncio.create_task(first(port))
        assert await asyncio.to_thread(asr.entered.wait, BOUND)  # the first transcription holds the ASR
        async with AsyncTcpClient("127.0.0.1", port) as c:  # queued behind it, then leaves
            await audio(c, 0.5)
        assert await asyncio.to_thread(left.wait, BOUND)  # the server saw it leave
        asr.hold.set()
        await holder

    handler = Left()
    log = logging.getLogger("rkvoice.wyoming.handler")
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    asr.hold.clear()
    try:
        with serving(engines) as port:
            run(go(port))
            events = transcribe(port, "zh", pcm(1.0))  # the next client
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert Transcript.is_type(events[-1].type)
    assert asr.calls == [4000, 16000]  # the first request, then the next client's; never the one that left


def test_a_synthesis_for_a_client_that_left_stops_after_the_piece_in_progress(fakes):
    engines, _, zh, _ = fakes
    entered, hold, left = threading.Event(), threading.Event(), threading.Event()
    generate = zh.generate

    def held(text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        entered.set()
        assert hold.wait(BOUND)
        return generate(text, sid, speed)

    zh.generate = held  # type: ignore[method-assign]

    class Left(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if " left; its " in record.getMessage():
                left.set()

    async def go(port: int) -> None:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Synthesize(text="今天天气不错。我们出去走走吧。晚上再一起吃饭。明天见。").event())
            assert await asyncio.to_thread(entered.wait, BOUND)  # the first piece is being synthesised
        assert await asyncio.to_thread(left.wait, BOUND)
        hold.set()

    handler, log = Left(), logging.getLogger("rkvoice.wyoming.handler")
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        with serving(engines) as port:
            run(go(port))
            assert describe(port).tts  # the server goes on
            engines.tts_worker.submit(lambda: None).result(BOUND)  # the TTS worker has done what it had queued
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert zh.texts == ["今天天气不错。"]  # the piece in progress only; the rest was never synthesised


def test_an_llm_answer_for_a_client_that_left_is_stopped(fakes):
    engines, llm, *_ = fakes
    llm.free = False

    async def go(port: int) -> None:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Transcript(text="用一句话介绍一下月亮").event())
            llm.go.release()
            await read_until(c, lambda e: e.type == "handled-chunk")  # generating; then the client leaves

    with serving(engines) as port:
        run(go(port))
        assert llm.aborted.wait(BOUND)


def raw(port: int, payload: bytes) -> list[Event]:
    """Send raw bytes then a ping; the events up to the pong (or the server closing)."""

    async def go() -> list[Event]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(payload + b'{"type": "ping"}\n')
        await writer.drain()
        out: list[Event] = []
        while (event := await async_read_event(reader)) is not None:
            out.append(event)
            if event.type == "pong":
                break
        writer.close()
        return out

    return list(run(go()))


def line(kind: str, data: Any) -> bytes:
    return (json.dumps({"type": kind, "data": data}) + "\n").encode()


WRONG_TYPES = {
    "voice as a string": line("synthesize", {"text": "你好", "voice": "abc"}),
    "voice name as a number": line("synthesize", {"text": "你好", "voice": {"name": 5}}),
    "text as a number": line("synthesize", {"text": 5}),
    "data as a list": line("transcribe", [1, 2]),
    "data as a string": line("transcript", "现在几点"),
    "names as a string": line("detect", {"names": "xiaozhixiaozhi"}),
    "rate as a string": line("audio-start", {"rate": "16000", "width": 2, "channels": 1}),
    "width as a bool": line("audio-start", {"rate": 16000, "width": True, "channels": 1}),
    "transcript text as an object": line("transcript", {"text": {"a": 1}}),
}


@pytest.mark.parametrize("name", sorted(WRONG_TYPES))
def test_a_field_of_the_wrong_type_is_a_bad_event_without_a_traceback(fakes, name, caplog):
    engines, *_ = fakes
    with caplog.at_level(logging.INFO, logger="rkvoice.wyoming"), serving(engines) as port:
        events = raw(port, WRONG_TYPES[name])
    assert [e.type for e in events] == ["error", "pong"], events  # answered, and the connection goes on
    assert Error.from_event(events[0]).code == "bad-event"
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize("fault", [AttributeError("'NoneType' object has no attribute 'languages'"),
                                   KeyError("piper-joe")], ids=["AttributeError", "KeyError"])
def test_a_fault_of_the_server_is_an_internal_error_logged_once_and_the_connection_goes_on(
        fakes, monkeypatch, caplog, fault):
    """A bug inside the server's own code (not a malformed event) is reported as ``internal``, not as
    the client's ``bad-event``, with one logged traceback; the next request on the connection is served."""
    from rkvoice.wyoming.tts import Voices

    engines, *_ = fakes
    choose = Voices.choose
    calls: list[str] = []

    def buggy(self: Voices, name: str | None, language: str | None, text: str) -> str:
        calls.append(text)
        if len(calls) == 1:
            raise fault
        return choose(self, name, language, text)

    monkeypatch.setattr(Voices, "choose", buggy)

    async def go(port: int) -> list[Event]:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Synthesize(text="早上好。").event())
            out = await read_until(c, lambda e: e.type in ("audio-stop", "error"))
            await c.write_event(Synthesize(text="晚上好。").event())
            out += await read_until(c, lambda e: e.type in ("audio-stop", "error"))
            await c.write_event(Ping(text="still there").event())
            return out + await read_until(c, lambda e: e.type == "pong")

    with caplog.at_level(logging.INFO, logger="rkvoice.wyoming"), serving(engines) as port:
        events = run(go(port))
    types = [e.type for e in events]
    assert types[0] == "error" and Error.from_event(events[0]).code == "internal"
    assert type(fault).__name__ in Error.from_event(events[0]).text
    assert types[1] == "audio-start" and types[-2:] == ["audio-stop", "pong"]  # the same connection goes on
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and tracebacks[0].exc_info[1] is fault


def test_deeply_nested_json_is_malformed_without_a_traceback(fakes, caplog):
    engines, *_ = fakes
    nested = b'{"type": "transcript", "data": {"text": ' + b"[" * 20000 + b"]" * 20000 + b"}}\n"
    with caplog.at_level(logging.INFO, logger="rkvoice.wyoming"), serving(engines) as port:
        events = raw(port, nested)
        assert describe(port).asr  # others are served
    assert [Error.from_event(e).code for e in events] == ["malformed"]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


# -- each request a turn: one log line with its figures, cancelled with its client -----------------------


class RequestLines(logging.Handler):
    """The server's one line per request (logger rkvoice.wyoming.context); ``wait(n)`` for the first n."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.cond:
            self.lines.append(record.getMessage())
            self.cond.notify_all()

    def wait(self, n: int) -> list[str]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.lines) >= n, BOUND), self.lines
            return list(self.lines)


@contextmanager
def request_lines(logger: str = "rkvoice.wyoming.context") -> Iterator[RequestLines]:
    handler, log = RequestLines(), logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


@pytest.fixture
def clock(monkeypatch):
    """The requests' timelines on a FakeClock that only the scripted engines move."""
    from tests.support import FakeClock

    fake = FakeClock()
    monkeypatch.setattr("rkvoice.wyoming.context.MonotonicClock", lambda: fake)
    return fake


def taking(clock: Any, seconds: float, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` taking ``seconds`` on the clock (moved by the engine itself, before the result is seen)."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        clock.advance(seconds)
        return call(*args, **kwargs)

    return timed


def speak(port: int, text: str) -> list[Event]:
    async def go() -> list[Event]:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Synthesize(text=text).event())
            return await read_until(c, lambda e: AudioStop.is_type(e.type))

    return list(run(go()))


def test_a_synthesis_is_logged_with_its_timings(fakes, clock):
    from rkvoice.pieces import Pieces

    engines, _, zh, _ = fakes
    zh.generate = taking(clock, 0.2, zh.generate)  # type: ignore[method-assign]
    text = "今天天气不错。我们出去走走吧。晚上再一起吃饭。明天见。"
    with request_lines() as lines, serving(engines) as port:
        speak(port, text)
        line = lines.wait(1)[0]
    n = len(zh.texts)
    assert n >= 2 and zh.texts == Pieces(zh, load_config(), Turn()).cut(text)  # the speaker's cut
    assert line.endswith(f" synthesis {text!r}: first_audio_ms=200 synth_ms={200 * n} audio_s={len(text) / 10:g} "
                         f"chunks={n} total_ms={200 * n}"), line


def test_a_transcription_and_an_answer_are_logged_with_their_timings(fakes, clock):
    engines, *_ = fakes
    engines.asr.transcribe = taking(clock, 0.15, engines.asr.transcribe)  # type: ignore[method-assign]
    with request_lines() as lines, serving(engines) as port:
        transcribe(port, "zh", pcm(1.0))
        ask(port, "用一句话介绍一下月亮")
        got = lines.wait(2)
    assert got[0].endswith(" transcription '你好': asr_ms=150 total_ms=150"), got
    assert got[1].endswith(" answer '用一句话介绍一下月亮': route=llm llm_first_token_ms=0 total_ms=0"), got  # answered,
    # so not cancelled by the client leaving as soon as it has its answer


def test_a_streamed_synthesis_of_a_client_that_left_is_cancelled_after_the_piece_in_progress(fakes):
    engines, _, zh, _ = fakes
    entered, hold = threading.Event(), threading.Event()
    zh.generate = taking_hold(entered, hold, zh.generate)  # type: ignore[method-assign]

    async def go(port: int) -> None:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(SynthesizeStart().event())
            await c.write_event(SynthesizeChunk(text="今天天气不错。我们出去走走吧。晚上再一起吃饭。明天见。").event())
            assert await asyncio.to_thread(entered.wait, BOUND)  # the first piece is being synthesised

    with request_lines() as lines, serving(engines) as port:
        run(go(port))
        line = lines.wait(1)[0]  # the turn ends when the client leaves, not when the engine is done
        hold.set()
        assert describe(port).tts  # the server goes on
        engines.tts_worker.submit(lambda: None).result(BOUND)  # the TTS worker has done what it had queued
    assert "streamed synthesis '今天天气不错。" in line and line.endswith("cancelled (client gone)"), line
    assert zh.texts == ["今天天气不错。"]  # the piece in progress only


def taking_hold(entered: threading.Event, hold: threading.Event, call: Callable[..., Any]) -> Callable[..., Any]:
    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert hold.wait(BOUND)
        return call(*args, **kwargs)

    return held


def test_an_answer_and_a_transcription_of_a_client_that_left_are_logged_as_cancelled(fakes):
    engines, llm, *_ = fakes
    llm.free = False
    asr = engines.asr

    async def leave_answer(port: int) -> None:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Transcript(text="用一句话介绍一下月亮").event())
            assert await asyncio.to_thread(llm.started.wait, BOUND)

    async def leave_transcription(port: int) -> None:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(Transcribe().event())
            await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm(0.5)).event())
            await c.write_event(AudioStop().event())
            assert await asyncio.to_thread(asr.entered.wait, BOUND)

    asr.hold.clear()
    with request_lines() as lines, serving(engines) as port:
        run(leave_answer(port))
        assert llm.aborted.wait(BOUND)  # the turn's handle stopped the LLM
        lines.wait(1)  # logged once the LLM has let go of the turn
        run(leave_transcription(port))
        got = lines.wait(2)
        asr.hold.set()
    assert got[0].startswith("wyoming ") and " answer '用一句话介绍一下月亮': " in got[0], got
    assert got[0].endswith("cancelled (client gone)") and got[1].endswith("cancelled (client gone)"), got
    assert " transcription '': " in got[1], got


def test_an_answer_is_not_cancelled_by_its_client_leaving_once_it_has_it(fakes):
    from rkvoice.gate import PriorityGate

    engines, *_ = fakes
    gate, let_go = engines.answer_gate, threading.Event()

    @contextmanager
    def remote(on_preempt: Any = None) -> Iterator[None]:
        with PriorityGate.remote(gate, on_preempt):
            yield
        assert let_go.wait(BOUND)  # the worker lets go of the model only after the client has left

    gate.remote = remote  # type: ignore[method-assign]
    with request_lines() as lines, request_lines("rkvoice.wyoming.handler") as left, serving(engines) as port:
        assert [e.type for e in ask(port, "现在几点")] == ["handled"]
        assert " left; its transcript request is cancelled" in left.wait(1)[0]
        let_go.set()
        line = lines.wait(1)[0]
    assert " answer '现在几点': route=tool:time total_ms=" in line and "cancelled" not in line, line


def test_a_streamed_text_over_the_limit_is_dropped_and_its_turn_says_why(fakes):
    engines, *_ = fakes

    async def go(port: int) -> Event:
        async with AsyncTcpClient("127.0.0.1", port) as c:
            await c.write_event(SynthesizeStart().event())
            await c.write_event(SynthesizeChunk(text="今天天气").event())
            await c.write_event(SynthesizeChunk(text="不错，我们出去走走吧。").event())
            return (await read_until(c, lambda e: e.type == "error"))[-1]

    with request_lines() as lines, serving(engines, WyomingConfig(max_text_chars=10)) as port:
        error = run(go(port))
        line = lines.wait(1)[0]
    assert Error.from_event(error).code == "text-too-long"
    assert " streamed synthesis '" in line and line.endswith(" cancelled (text-too-long)"), line
