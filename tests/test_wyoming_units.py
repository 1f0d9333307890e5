"""Wyoming server parts without models: settings, audio conversion, the priority gate, discovery."""

from __future__ import annotations

import asyncio
import logging
import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from fakes import wait_until

pytest.importorskip("wyoming", reason="wyoming is not installed (requirements/portable.txt)")

from rkvoice.config import WyomingConfig, load_config  # noqa: E402
from rkvoice.endpoint import parse_uri  # noqa: E402
from rkvoice.errors import RkvoiceError  # noqa: E402
from rkvoice.gate import LocalAssistant, PriorityGate  # noqa: E402
from rkvoice.turn import Turn  # noqa: E402
from rkvoice.wyoming.audio import AudioIn, pcm_to_float  # noqa: E402
from rkvoice.wyoming.discovery import Announcer  # noqa: E402
from rkvoice.wyoming.handoff import HANDOFF_S, KEEP_S, Heard  # noqa: E402
from rkvoice.wyoming.server import from_cfg  # noqa: E402

FMT = (16000, 2, 1)


def heard(samples: np.ndarray, phrase_end_s: float, chunk: int = 1024) -> Heard:
    """A detect stream of ``samples`` (int16) as the reader tapes it, detected at clock time 10.0."""
    tape = Heard(FMT)
    pcm = samples.astype("<i2").tobytes()
    for i in range(0, len(pcm), 2 * chunk):
        tape.add(pcm[i:i + 2 * chunk])
    tape.detected(phrase_end_s, 10.0)
    return tape


def test_the_audio_after_a_detected_phrase_goes_before_the_hosts_next_transcription():
    said = np.random.default_rng(1).integers(-30000, 30000, 4 * 16000)  # never the same chunk twice
    tape = heard(said, 1.5)
    after = said[24000:].astype("<i2").tobytes()
    assert tape.take(10.2, FMT, b"\x01\x02") == after  # the client's own chunk, not in the tape


def test_the_tape_goes_before_the_hosts_next_transcription_once_and_before_no_other_hosts():
    """The server keeps each host's last detected tape (host -> tape) for that host's next transcription."""
    from concurrent.futures import Future

    from wyoming.asr import Transcript

    from rkvoice.hear.pinyin_match import PhraseMatcher
    from rkvoice.wyoming.context import Requests
    from rkvoice.wyoming.listen import AsrRequest

    said = np.random.default_rng(1).integers(-30000, 30000, 4 * 16000)
    handoff = {"10.0.0.2": heard(said, 1.5)}

    def transcribe_on_worker(samples: np.ndarray) -> Future[str]:
        done: Future[str] = Future()
        done.set_result(str(len(samples)))
        return done

    async def transcribe(host: str) -> int:
        sent: list[Any] = []

        async def send(event: Any) -> None:
            sent.append(event)

        audio = AudioIn(*FMT, 30.0)
        request = AsrRequest(SimpleNamespace(transcribe=transcribe_on_worker), "zh", Requests("peer", SimpleNamespace(now=lambda: 10.2)),
                             handoff, host, PhraseMatcher("小智小智"))
        await request.begin()
        await request.feed(audio, b"\x01\x02" * 800, send)
        await request.end(audio, send)
        return int(Transcript.from_event(sent[0]).text)

    assert asyncio.run(transcribe("10.0.0.9")) == 800  # another host's detection
    assert asyncio.run(transcribe("10.0.0.2")) == 800 + 40000  # the 2.5 s after the phrase in front
    assert asyncio.run(transcribe("10.0.0.2")) == 800  # taken once


def test_a_transcription_that_is_not_the_detections_gets_nothing_before_it():
    said = np.random.default_rng(3).integers(-30000, 30000, 3 * 16000)
    for started_at, fmt in ((10.0 + HANDOFF_S + 0.1, FMT), (9.9, FMT), (10.1, (48000, 2, 1))):
        assert heard(said, 1.0).take(started_at, fmt, b"") == b"", (started_at, fmt)


def test_a_client_that_resends_its_own_buffer_gets_only_what_it_did_not_resend():
    said = np.random.default_rng(2).integers(-30000, 30000, 4 * 16000)
    pcm = said.astype("<i2").tobytes()
    for resent_from, expected in ((2.0, pcm[48000:64000]), (1.0, b"")):  # after the phrase's end, and before it
        at = int(resent_from * 16000) * 2
        assert heard(said, 1.5).take(10.1, FMT, pcm[at:at + 2048]) == expected, resent_from


def test_silence_is_not_taken_for_a_resent_buffer_and_the_tape_is_bounded():
    said = np.zeros(int((KEEP_S + 5) * 16000), np.int16)
    tape = heard(said, KEEP_S + 1.0)
    tape.add(bytes(int(KEEP_S * 16000) * 2))  # more audio after the detection than is kept
    assert len(tape.audio or b"") <= 2 * int(KEEP_S * 16000) * 2
    got = tape.take(10.1, FMT, bytes(2048))  # the silent first chunk is found many times
    assert len(got) == int(KEEP_S * 16000) * 2


def test_uri_forms():
    assert parse_uri("tcp://127.0.0.1:10300").loopback
    assert parse_uri("unix:///run/rkvoice/w.sock").path == "/run/rkvoice/w.sock"
    assert not parse_uri("tcp://0.0.0.0:10300").loopback
    assert not parse_uri("tcp://192.168.1.5:10300").loopback
    for bad in ("http://x:1", "tcp://127.0.0.1", "tcp://:10300", "unix://", "10300"):
        with pytest.raises(RkvoiceError, match=r"tcp://0\.0\.0\.0:10300"):
            parse_uri(bad)


def test_settings_are_checked_and_read_from_the_config():
    assert from_cfg(load_config()) == WyomingConfig()  # off by default
    cfg = load_config([{"wyoming": {"uri": "tcp://127.0.0.1:1", "max_audio_s": 5}}])
    got = from_cfg(cfg, zeroconf=True)
    assert (got.uri, got.max_audio_s, got.zeroconf) == ("tcp://127.0.0.1:1", 5, True)
    assert from_cfg(cfg, uri=None).uri == "tcp://127.0.0.1:1"
    with pytest.raises(RkvoiceError, match="colour"):
        load_config([{"wyoming": {"colour": "red"}}])
    with pytest.raises(RkvoiceError, match="wyoming.max_audio_s"):
        WyomingConfig(max_audio_s=0)
    with pytest.raises(RkvoiceError, match="wyoming.idle_timeout_s"):
        load_config([{"wyoming": {"idle_timeout_s": -1}}])
    with pytest.raises(RkvoiceError, match="only tcp:// and unix://"):
        load_config([{"wyoming": {"uri": "stdio://"}}])


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_pcm_of_every_width_and_channels_becomes_mono_float(width):
    x = np.sin(np.linspace(0, 20, 400)).astype(np.float32) * 0.5
    scale = {1: 127, 2: 32767, 3: 2**23 - 1, 4: 2**31 - 1}[width]
    ints = np.round(x * scale).astype(np.int64)
    stereo = np.stack([ints, ints], axis=1).reshape(-1)
    if width == 1:
        data = (stereo + 128).astype(np.uint8).tobytes()
    elif width == 3:
        data = b"".join(int(v).to_bytes(3, "little", signed=True) for v in stereo)
    else:
        data = stereo.astype(f"<i{width}").tobytes()
    got = pcm_to_float(data, width, 2)
    assert got.dtype == np.float32 and len(got) == len(x)
    assert np.max(np.abs(got - x)) < 2.0 / scale + 1e-6


def test_audio_stream_resamples_counts_and_refuses_past_the_limit():
    stream = AudioIn(48000, 2, 1, max_s=1.0)
    second = (np.zeros(48000, "<i2")).tobytes()
    out = stream.convert(second[: len(second) // 2])
    out = np.concatenate([out, stream.convert(second[len(second) // 2:]), stream.finish()])
    assert abs(len(out) - 16000) <= 2
    with pytest.raises(RkvoiceError, match="max_audio_s"):
        stream.convert(b"\0\0" * 10)


def test_bad_format_is_refused():
    with pytest.raises(RkvoiceError, match="rate=1000"):
        AudioIn(1000, 2, 1, 10)
    with pytest.raises(RkvoiceError, match="width=5"):
        AudioIn(16000, 5, 1, 10)


@pytest.mark.parametrize("width,channels", [(2, 1), (2, 2), (3, 1), (4, 2), (1, 3)])
def test_chunks_of_any_byte_length_carry_partial_frames(width, channels):
    rng = np.random.default_rng(width * 10 + channels)
    frames = 1000
    data = rng.integers(0, 256, frames * width * channels, dtype=np.uint8).tobytes()
    whole = pcm_to_float(data, width, channels)
    stream = AudioIn(16000, width, channels, max_s=10)
    cuts = sorted({0, len(data), *rng.integers(1, len(data), 40).tolist(), 1, 2, 3})  # odd and one-byte chunks too
    got = np.concatenate([stream.convert(data[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)])
    got = np.concatenate([got, stream.finish()])
    assert np.array_equal(got, whole)  # the same samples as the stream in one piece
    assert stream.seconds == pytest.approx(frames / 16000)


def test_only_a_stream_that_ends_inside_a_frame_is_refused():
    stream = AudioIn(16000, 2, 2, max_s=10)
    assert len(stream.convert(b"\0" * 6)) == 1  # one frame now, half a frame carried
    with pytest.raises(RkvoiceError, match="ended inside a frame"):
        stream.finish()


def test_a_waiting_local_caller_goes_before_waiting_remote_callers_which_queue_in_order():
    gate = PriorityGate("test")
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with gate.remote():
            holding.set()
            release.wait(5)

    def remote(name: str) -> None:
        with gate.remote():
            order.append(name)

    def local(name: str) -> None:
        with gate.local():
            order.append(name)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    assert holding.wait(5)
    for target, name in ((remote, "remote 1"), (remote, "remote 2"), (remote, "remote 3"), (local, "local")):
        t = threading.Thread(target=target, args=(name,))
        t.start()
        threads.append(t)
        assert wait_until(lambda n=len(threads) - 1: len(gate._waiting) == n)  # queued behind the holder, in this order
    release.set()
    for t in threads:
        t.join(5)
    assert order == ["local", "remote 1", "remote 2", "remote 3"]  # remote callers first come, first served


def test_a_local_caller_preempts_a_remote_holder():
    gate = PriorityGate("answer")
    preempted = threading.Event()
    holding = threading.Event()

    def remote() -> None:
        with gate.remote(on_preempt=preempted.set):
            holding.set()
            assert preempted.wait(5)  # a preempted holder stops early and lets go

    t = threading.Thread(target=remote)
    t.start()
    assert holding.wait(5)
    with gate.local():
        assert preempted.is_set()
    t.join(5)


def _remote_taken(gate: PriorityGate) -> tuple[threading.Event, threading.Thread]:
    taken = threading.Event()

    def remote() -> None:
        with gate.remote():
            taken.set()

    t = threading.Thread(target=remote, daemon=True)
    t.start()
    return taken, t


def test_local_assistant_holds_the_gate_while_the_llm_answers():
    gate = PriorityGate("answer")
    reply = SimpleNamespace(route="llm", llm=object(), deltas=iter(["现在", "三点"]))
    local = LocalAssistant(SimpleNamespace(reply=lambda text, turn=None: reply), gate)
    got = local.reply("讲个故事", Turn())
    taken, t = _remote_taken(gate)
    assert not taken.wait(0.2)  # the reply is still being read
    assert "".join(got.deltas) == "现在三点"
    assert taken.wait(5)
    t.join(5)


def test_local_assistant_lets_go_for_a_tool_answer_and_for_a_cancelled_turn():
    gate = PriorityGate("answer")
    tool = SimpleNamespace(route="tool:time", llm=None, deltas=iter(["三点"]))
    LocalAssistant(SimpleNamespace(reply=lambda text, turn=None: tool), gate).reply("现在几点", Turn())
    taken, t = _remote_taken(gate)
    assert taken.wait(5)  # a tool's answer needs no model: the gate is free at once
    t.join(5)
    wedged = SimpleNamespace(route="llm", llm=object(), deltas=iter(["从前"]))
    turn = Turn()
    LocalAssistant(SimpleNamespace(reply=lambda text, turn=None: wedged), gate).reply("讲个故事", turn)
    taken, t = _remote_taken(gate)
    assert not taken.wait(0.2)  # held while the LLM answers ...
    turn.cancel("timeout")  # ... until its turn is cancelled (a wedged model must not hold the next turn)
    assert taken.wait(5)
    t.join(5)


def test_a_failed_announcement_is_a_warning(caplog):
    announcer = Announcer("rkvoice-test", "not-an-address", 10300)
    with caplog.at_level(logging.WARNING, logger="rkvoice.wyoming.discovery"):
        assert asyncio.run(announcer.start()) is False
    assert "could not announce" in caplog.text


def test_the_announcement_can_be_resolved():
    from zeroconf.asyncio import AsyncZeroconf

    async def go() -> tuple[int | None, list[str]] | None:
        announcer = Announcer("rkvoice-unit-test", "0.0.0.0", 10798)
        if not await announcer.start():
            pytest.skip("this machine cannot announce over mDNS (no multicast interface)")
        browser = AsyncZeroconf()
        try:
            info = await browser.async_get_service_info("_wyoming._tcp.local.",
                                                        "rkvoice-unit-test._wyoming._tcp.local.", 3000)
        finally:
            await browser.async_close()
            await announcer.stop()
        return (info.port, info.parsed_addresses()) if info is not None else None

    found = asyncio.run(go())
    assert found is not None and found[0] == 10798 and found[1]


def test_the_wake_engines_second_look_goes_through_the_asr_gate_too():
    from rkvoice.gate import Local, gated_asr
    from rkvoice.hear.wake import can_prime

    class Plain:
        name = "plain"
        languages = ("zh",)

        def transcribe(self, samples):
            return "你好"

    class Primed(Plain):
        def transcribe_primed(self, samples, phrase):
            return phrase

        def phrase_logprob(self, samples, phrase):
            return -0.5

    gate = PriorityGate("asr")
    assert not can_prime(gated_asr(Plain(), Local(gate)))  # no second look the engine cannot do
    local = gated_asr(Primed(), Local(gate))
    assert can_prime(local)
    held, release = threading.Event(), threading.Event()

    def remote() -> None:
        with gate.remote():
            held.set()
            release.wait(5)

    t = threading.Thread(target=remote, daemon=True)
    t.start()
    assert held.wait(5)
    got: list[str] = []
    caller = threading.Thread(target=lambda: got.append(local.transcribe_primed(None, "小智小智")), daemon=True)
    caller.start()
    caller.join(0.2)
    assert got == []  # waits for the gate like transcribe does
    release.set()
    caller.join(5)
    assert got == ["小智小智"]


def test_a_wake_decode_goes_before_the_transcriptions_queued_for_other_clients():
    """Issue 24: nothing queued ahead of a wake decode. A transcription holds the ASR; two more are
    queued; a detect stream's wake engine then decodes: it runs next, the transcriptions after it."""
    from rkvoice.wyoming.engines import Engines, Rank

    decoded: list[str] = []
    busy, release = threading.Event(), threading.Event()

    class Asr:
        name = "asr"
        languages = ("zh",)

        def transcribe(self, samples: str) -> str:
            decoded.append(samples)
            if samples == "client 1":
                busy.set()
                assert release.wait(5)
            return samples

    wakes: list[Any] = []
    engines = Engines(asr=Asr(), tts=None, assistant=None, wake_factory=wakes.append)
    submitted = threading.Semaphore(0)
    submit = engines.asr_worker.submit

    def counted(call: Any, rank: Rank = Rank.REMOTE) -> Any:
        done = submit(call, rank)
        submitted.release()
        return done

    engines.asr_worker.submit = counted  # type: ignore[method-assign]
    try:
        first = engines.transcribe("client 1")
        assert busy.wait(5)
        queued = [engines.transcribe(name) for name in ("client 2", "client 3")]
        engines.borrow_wake()
        heard: list[str] = []
        wake = threading.Thread(target=lambda: heard.append(wakes[0].transcribe("wake")), daemon=True)
        wake.start()
        for _ in range(4):  # three transcriptions and the wake decode are on the worker's queue
            assert submitted.acquire(timeout=5)
        release.set()
        assert [f.result(5) for f in (first, *queued)] == ["client 1", "client 2", "client 3"]
        wake.join(5)
        assert heard == ["wake"]
        assert decoded == ["client 1", "wake", "client 2", "client 3"]
    finally:
        release.set()
        engines.close()


def test_a_worker_shut_down_cancels_what_it_had_queued_and_takes_no_more():
    from rkvoice.wyoming.engines import Worker

    worker = Worker("test")
    go = threading.Event()

    def first() -> str:
        assert go.wait(5)
        worker.shutdown()  # from its own thread: no join, the running call finishes
        return "done"

    running = worker.submit(first)
    queued = worker.submit(lambda: "never")
    go.set()
    assert running.result(5) == "done" and queued.cancelled()
    with pytest.raises(RuntimeError):
        worker.submit(lambda: None)
