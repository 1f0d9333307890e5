"""Wyoming answers through the real Assistant and LlmStream with a scripted LLM: streamed chunks,
and the local turn taking the model from a Wyoming answer in progress."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("wyoming", reason="wyoming is not installed (requirements/portable.txt)")

from wyoming.asr import Transcript  # noqa: E402
from wyoming.client import AsyncTcpClient  # noqa: E402
from wyoming.event import Event  # noqa: E402
from wyoming.handle import Handled, HandledChunk, NotHandled  # noqa: E402

from rkvoice.answer.llm.base import LlmEngine  # noqa: E402
from rkvoice.config import WyomingConfig, load_config  # noqa: E402
from rkvoice.gate import LocalAssistant  # noqa: E402
from rkvoice.turn import Turn  # noqa: E402
from rkvoice.wyoming.engines import Engines  # noqa: E402
from rkvoice.wyoming.server import serve_wyoming  # noqa: E402

QUESTION = "用一句话介绍一下月亮"
PIECES = ["月亮是", "地球唯一的", "天然卫星。"]


class ScriptedLlm(LlmEngine):
    """Streams PIECES, waiting for ``go`` before each one; ``abort()`` ends the stream."""

    name = "scripted"

    def __init__(self) -> None:
        self.go = threading.Semaphore(0)
        self.aborted = threading.Event()
        self.started = threading.Event()

    def load(self) -> None:
        pass

    def stream(self, messages: list[dict[str, str]]) -> Iterator[str]:
        self.aborted.clear()
        self.started.set()
        for piece in PIECES:
            while not self.go.acquire(timeout=0.05):
                if self.aborted.is_set():
                    return
            yield piece

    def abort(self) -> None:
        self.aborted.set()


@pytest.fixture
def served(tmp_path):
    from rkvoice.answer.assistant import Assistant
    from rkvoice.state import StateStore

    cfg = load_config()
    llm = ScriptedLlm()
    assistant = Assistant(cfg, llm=llm, store=StateStore(tmp_path / "state"))
    engines = Engines(asr=SimpleNamespace(name="whisper", languages=("zh",)), tts=SimpleNamespace(name="fastspeech2"),
                      assistant=assistant, wake_factory=lambda asr: None)
    stop, ready, started = threading.Event(), threading.Event(), []

    def on_ready(server: Any) -> None:
        started.append(server)
        ready.set()

    thread = threading.Thread(target=serve_wyoming, args=(replace(cfg, wyoming=WyomingConfig()), "tcp://127.0.0.1:0"),
                              daemon=True, kwargs={"engines": engines, "stop": stop, "ready": on_ready})
    thread.start()
    assert ready.wait(30)
    yield started[0].port, llm, engines
    stop.set()
    thread.join(10)


async def ask(port: int, on_event: Any = None) -> list[Event]:
    events: list[Event] = []
    async with AsyncTcpClient("127.0.0.1", port) as c:
        await c.write_event(Transcript(text=QUESTION).event())
        while True:
            event = await asyncio.wait_for(c.read_event(), 20)
            assert event is not None
            events.append(event)
            if on_event is not None:
                await on_event(event)
            if event.type in ("handled", "not-handled"):  # what a client that does not stream waits for
                return events


def test_an_llm_answer_streams_chunk_by_chunk(served):
    port, llm, _ = served
    seen: list[str] = []

    async def release_next(event: Event) -> None:
        seen.append(event.type)
        if event.type in ("handled-start", "handled-chunk"):
            llm.go.release()  # the next piece is generated only after this one reached the client

    events = asyncio.run(ask(port, release_next))
    assert seen == ["handled-start", "handled-chunk", "handled-chunk", "handled-chunk", "handled-stop", "handled"]
    assert "".join(HandledChunk.from_event(e).text for e in events if e.type == "handled-chunk") == "".join(PIECES)
    assert Handled.from_event(events[-1]).text == "".join(PIECES)  # the whole answer, for clients that do not stream


def test_the_local_turn_takes_the_model_from_a_wyoming_answer(served):
    port, llm, engines = served
    local_text: list[str] = []

    def local_turn() -> None:
        assert llm.started.wait(10)  # the Wyoming answer is generating
        reply = LocalAssistant(engines.assistant, engines.answer_gate).reply(QUESTION, Turn(text=QUESTION))
        for _ in PIECES:
            llm.go.release()
        local_text.append("".join(reply.deltas))

    thread = threading.Thread(target=local_turn)
    thread.start()
    events = asyncio.run(ask(port))
    thread.join(20)
    assert events[-1].type == "not-handled" and "handled" not in [e.type for e in events]
    assert "local assistant" in (NotHandled.from_event(events[-1]).text or "")
    assert local_text == ["".join(PIECES)]
