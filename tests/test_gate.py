"""The gated engine views (rkvoice.gate): every call of an engine protocol goes through the view's
Runner, found by introspecting the protocols, so a call added to a protocol cannot bypass the gate."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import pytest

from rkvoice.gate import GatedAsr, GatedPrimedAsr, GatedTts, Local, PriorityGate, gated_asr
from rkvoice.hear.asr import AsrEngine
from rkvoice.hear.wake import PrimedAsr
from rkvoice.tts.base import StreamingTts, TtsEngine

T = TypeVar("T")


class Watched:
    """A Runner that counts its calls and knows whether one is running."""

    def __init__(self) -> None:
        self.calls = 0
        self.inside = False

    def __call__(self, call: Callable[[], T]) -> T:
        self.calls += 1
        self.inside = True
        try:
            return call()
        finally:
            self.inside = False


class Engine:
    """Every protocol's calls at once; each records whether the runner was running when it was called."""

    name = "engine"
    languages: tuple[str, ...] = ("zh",)
    sample_rate = 16000
    streaming = True
    piece_chars = (7, 30)

    def __init__(self, runner: Watched) -> None:
        self.runner = runner
        self.called: dict[str, bool] = {}

    def _seen(self, call: str) -> None:
        self.called[call] = self.runner.inside

    def load(self) -> None:
        self._seen("load")

    def transcribe(self, samples: np.ndarray) -> str:
        self._seen("transcribe")
        return "你好"

    def transcribe_primed(self, samples: np.ndarray, phrase: str) -> str:
        self._seen("transcribe_primed")
        return phrase

    def phrase_logprob(self, samples: np.ndarray, phrase: str) -> float:
        self._seen("phrase_logprob")
        return -0.5

    def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
        self._seen("generate")
        return np.zeros(10, dtype=np.float32), 16000

    def stream(self, text: str, sid: int = 0, speed: float = 1.0) -> Iterator[tuple[np.ndarray, bool]]:
        self._seen("stream")
        for last in (False, False, True):
            self.called.setdefault("stream parts", True)
            self.called["stream parts"] &= self.runner.inside
            yield np.zeros(4, dtype=np.float32), last


ARGS: dict[str, tuple[Any, ...]] = {
    "load": (),
    "transcribe": (np.zeros(16),),
    "transcribe_primed": (np.zeros(16), "小智小智"),
    "phrase_logprob": (np.zeros(16), "小智小智"),
    "generate": ("你好",),
    "stream": ("你好",),
}


def _calls(protocol: type) -> list[str]:
    """The protocol's methods (not its data members or properties), by introspection."""
    return sorted(n for n in protocol.__protocol_attrs__  # type: ignore[attr-defined]
                  if inspect.isfunction(inspect.getattr_static(protocol, n, None)))


def _data(protocol: type) -> list[str]:
    return sorted(n for n in protocol.__protocol_attrs__  # type: ignore[attr-defined]
                  if not inspect.isfunction(inspect.getattr_static(protocol, n, None)))


@pytest.mark.parametrize(("protocol", "view"), [
    (AsrEngine, lambda e, r: GatedAsr(e, r)),
    (PrimedAsr, lambda e, r: GatedPrimedAsr(e, r)),
    (TtsEngine, lambda e, r: GatedTts(e, r)),
    (StreamingTts, lambda e, r: GatedTts(e, r)),
], ids=["AsrEngine", "PrimedAsr", "TtsEngine", "StreamingTts"])
def test_every_call_of_the_protocol_runs_through_the_gate(protocol: type, view: Any) -> None:
    calls = _calls(protocol)
    assert calls, f"{protocol.__name__} has no calls?"
    unknown = set(calls) - set(ARGS)
    assert not unknown, f"{protocol.__name__} has calls this test does not know how to make: {unknown}"
    runner = Watched()
    engine = Engine(runner)
    gated = view(engine, runner)
    for call in calls:
        got = getattr(type(gated), call, None)
        assert got is not None and inspect.isfunction(got), f"{type(gated).__name__} does not define {call}"
        before = runner.calls
        result = getattr(gated, call)(*ARGS[call])
        if inspect.isgenerator(result):
            list(result)
            assert engine.called["stream parts"], "a part of the stream was made outside the gate"
        assert engine.called.get(call) is True, f"{call} reached the engine outside the gate"
        assert runner.calls > before
    for member in _data(protocol):  # name, languages, sample_rate, streaming: the engine's own
        assert getattr(gated, member) == getattr(engine, member)


def test_a_second_look_is_offered_only_for_an_engine_that_has_it() -> None:
    runner = Watched()

    class Plain:
        name = "plain"
        languages: tuple[str, ...] = ("zh",)

        def load(self) -> None: ...

        def transcribe(self, samples: np.ndarray) -> str:
            return ""

    assert type(gated_asr(Plain(), runner)) is GatedAsr
    assert type(gated_asr(Engine(runner), runner)) is GatedPrimedAsr


def test_a_local_view_waits_for_a_remote_holder_of_the_gate() -> None:
    gate = PriorityGate("tts")
    runner = Watched()
    gated = GatedTts(Engine(runner), Local(gate))
    held, release = threading.Event(), threading.Event()

    def remote() -> None:
        with gate.remote():
            held.set()
            release.wait(5)

    threading.Thread(target=remote, daemon=True).start()
    assert held.wait(5)
    parts: list[bool] = []
    caller = threading.Thread(target=lambda: parts.extend(last for _, last in gated.stream("你好")), daemon=True)
    caller.start()
    caller.join(0.2)
    assert parts == []  # the stream's first part waits for the gate
    release.set()
    caller.join(5)
    assert parts == [False, False, True]


def test_a_view_gives_the_engines_piece_sizes_and_whether_it_streams() -> None:
    engine = Engine(Watched())
    gated = GatedTts(engine, Watched())
    assert gated.piece_chars == (7, 30) and gated.streaming
    engine.streaming = False
    assert not gated.streaming
    with pytest.raises(TypeError, match="does not stream"):
        next(gated.stream("你好"))
