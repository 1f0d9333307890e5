"""End to end: the daemon (the product plan: portable wake/VAD/Whisper, the portable voice, a null
player behind the reference tap) in an echo room. Its microphone hears, frame by frame, what the player
has played (the same PlayedAudio timeline the tap fills), 60 ms later, through a generated small-room
impulse response, +5 dB over the user; plus the user's cached portable-voice utterances.

Only the LLM is scripted (its answer says the assistant's name twice). The room, the player, the
reference tap, the microphone's timeline and the turns share one ManualClock that only the room moves,
one frame at a time, and only once the daemon is still: every frame and message it was given handled
whole (barge-ins and turn ends too), every turn's answer said and synthesised, every block handed to the
player, every wake cue played. Transcription, the answer and synthesis take none of its time, however
slow or loaded the machine, so the audio heard and played, and so the outcome, are the same on every
run. (On the real clock the barge-in came a Whisper decode late: 4 to 8 s on a loaded 2-core machine,
so the answer sometimes played to its end first.) Pass/fail is read from the daemon's own events
(wakes, turns, their reasons) and the audio timeline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import RecordingPlayer, ScriptedLlm, Stillness

from rkvoice.config import ROOT, Config, load_config
from rkvoice.daemon.sdnotify import Notifier
from rkvoice.daemon.service import Daemon
from rkvoice.hear import echo as echo_module
from rkvoice.hear.echo import EchoFilter, PlayedAudio
from rkvoice.hear.vad import vad_model_path
from rkvoice.stages import Speak, answer_spec, assistant, product_plan, speak_spec
from tests.support import ManualClock, SteppedSource
from tests.support.echo import USER_DBFS, Voices, rms, room_ir

RATE, FRAME = 16000, 512
DELAY_MS, LEVEL_DB = 60, 5.0
FOLLOW_UP_S = 3.0
ANSWER = ["我是小智，", "你的语音助手。", "我可以帮你查天气、设闹钟和记事情，", "有什么事情，随时说小智小智就好。"]
QUESTION, STORY, WAKE_ALONE = "小智小智，你是谁", "小智小智，给我讲个故事", "小智小智"
STILL_S = 120.0  # real seconds the daemon may take to go still after a frame (a Whisper decode on a loaded machine)


class EchoRoom(SteppedSource):
    """A microphone on ``clock`` (a SteppedSource: each frame made and handed over once the daemon is still):
    the frame at ``tick`` is made from the echo of what was played then plus the user's speech the script
    put there. ``script`` is a list of (cue, audio): when ``cue(tick)`` first holds, ``audio`` starts at
    that tick. Once ``until(tick)`` holds the room stops (``over`` is set) and waits to be closed."""

    def __init__(self, played: Callable[[], PlayedAudio], script: list[tuple[Callable[[int], bool], np.ndarray]],
                 ir: np.ndarray, gain: float, clock: ManualClock, settle: Callable[[], None],
                 until: Callable[[int], bool]) -> None:
        super().__init__(clock, settle, until=until)
        self.played = played
        self.script = script
        self.ir = ir
        self.gain = gain
        self.user = np.zeros(0, np.float32)
        self.user_at = 0
        self.said: list[int] = []
        """Ticks where each scripted utterance started."""
        self.heard = PlayedAudio()
        self.over = threading.Event()
        self._noise = np.random.default_rng(7)

    def frames(self) -> Iterator[np.ndarray]:
        self.heard = self.played()  # the speak stage's timeline (it outlives the stage's engines)
        yield from super().frames()

    def frame(self, t: int) -> np.ndarray | None:
        if self.until(t) or self.over.is_set():
            self.over.set()
            self.closed.wait()
            return None
        if self.script and t >= self.user_at + len(self.user) and self.script[0][0](t):
            self.user, self.user_at = self.script.pop(0)[1], t
            self.said.append(t)
        n = len(self.ir)
        ref = self.heard.read(t - n + 1, FRAME + n - 1)
        frame = np.convolve(ref, self.ir, mode="valid")[:FRAME] * self.gain
        lo = t - self.user_at
        if 0 <= lo < len(self.user):
            part = self.user[lo : lo + FRAME]
            frame[: len(part)] += part
        frame += self._noise.standard_normal(FRAME) * 10 ** (-65 / 20)
        return np.clip(frame, -1.0, 1.0).astype(np.float32)


class CountingDaemon(Daemon):
    """The daemon, its turn loop's work counted by ``still``."""

    def __init__(self, *args: Any, still: Stillness, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.still = still

    @contextmanager
    def busy(self, what: str) -> Iterator[None]:
        with self.still.busy(what), super().busy(what):
            yield


class Run:
    """The daemon on an EchoRoom, with ``hear.aec`` as given; the room stops once ``until(run, tick)``."""

    def __init__(self, tmp_path: Path, aec: str, barge_in: bool, until: Callable[[Run, int], bool]) -> None:
        self.cfg = load_config([{"state": {"dir": str(tmp_path / "state")},
                                 "daemon": {"lock_file": str(tmp_path / "rkvoice.lock")},
                                 "models": {"profile": "portable"},
                                 "hear": {"aec": aec, "follow_up_s": FOLLOW_UP_S}}], files=None)
        voices = Voices(self.cfg)
        user_level = 10 ** (USER_DBFS / 20)

        def user(text: str, speed: float, semitones: float) -> np.ndarray:
            audio = voices.user(text, speed, semitones)
            return (audio * user_level / max(rms(audio), 1e-9)).astype(np.float32)

        answer, rate = voices.assistant("".join(ANSWER))  # the voice's level: the echo is set from it
        gain = user_level * 10 ** (LEVEL_DB / 20) / max(rms(answer), 1e-9)
        self.answer_s = len(answer) / rate
        self.story_from: int | None = None
        """The tick where the second answer was first heard."""
        self.llm = ScriptedLlm(ANSWER)
        self.clock = ManualClock(100.0)
        self.still = Stillness(self.clock, lambda: self.loop, lambda: self.room.delivered, lambda: self.speak.speaker,
                               lambda: self.player, STILL_S)
        self.player: RecordingPlayer | None = None
        self.daemon: CountingDaemon | None = None
        script: list[tuple[Callable[[int], bool], np.ndarray]] = [
            (lambda t: t >= self.room.tick0 + RATE // 2, user(QUESTION, 1.0, -3.0))]
        if barge_in:
            script += [(self._first_answer_over, user(STORY, 0.9, 3.0)),
                       (self._playing_for(1.5), user(WAKE_ALONE, 1.1, 1.0))]
        else:
            script += [(self._first_answer_over, np.zeros(RATE // 10, np.float32))]  # marks the end
        self.room = EchoRoom(lambda: self.speak.played, script, room_ir(DELAY_MS, seed=3), gain, self.clock,
                             self._settle, lambda tick: until(self, tick))
        plan = product_plan(self.cfg, source=lambda c: self.room)
        stages = replace(plan.stages, answer=answer_spec(lambda c: assistant(c, llm=self.llm)),
                         speak=speak_spec(lambda c: Speak(c, self._player, clock=self.clock)))
        plan = replace(plan, stages=stages)
        self.daemon = CountingDaemon(self.cfg, plan, lambda: self.cfg, notifier=Notifier(socket_name=""),
                                     clock=self.clock, still=self.still)

    def _player(self, c: Config) -> RecordingPlayer:
        self.player = RecordingPlayer(c, self.clock)
        return self.player

    @property
    def speak(self) -> Speak:
        assert self.daemon is not None
        return self.daemon.stages.stages.speak

    @property
    def loop(self) -> Any:
        assert self.daemon is not None and self.daemon.listener is not None
        return self.daemon.listener.turn_loop

    def _settle(self) -> None:
        if not self.still.settle(self.room.closed):
            self.room.over.set()

    def _first_answer_over(self, tick: int) -> bool:
        """The first turn is over, its audio played, and the follow-up window it opened has passed."""
        assert self.daemon is not None
        end = self.speak.played.end_tick
        if self.daemon.turns < 1 or end is None:
            return False
        return tick >= end + int((FOLLOW_UP_S + 1.5) * RATE)

    def _playing_for(self, seconds: float) -> Callable[[int], bool]:
        """The second answer has been heard for ``seconds``."""
        first: list[int] = []

        def cue(tick: int) -> bool:
            if not first and len(self.llm.calls) >= 2 and self.speak.played.overlaps(tick - FRAME, tick):
                first.append(tick)
                self.story_from = tick
            return bool(first) and tick >= first[0] + int(seconds * RATE)
        return cue

    def go(self, timeout_s: float = 600.0) -> None:
        assert self.daemon is not None
        thread = threading.Thread(target=self.daemon.run, kwargs={"handle_signals": False}, daemon=True)
        thread.start()
        try:
            assert self.room.over.wait(timeout_s), "the room's script did not finish"
            assert self.still.stuck is None, f"the daemon did not go still within {STILL_S:g} s: {self.still.stuck}"
        finally:
            self.daemon.request_stop()
            thread.join(20)
        assert not thread.is_alive()


def _needs_models() -> None:
    if not vad_model_path(load_config([])).is_file() or not (ROOT / "models" / "portable").exists():
        pytest.skip("portable models are absent (run ./install.sh)")


def test_the_daemon_does_not_wake_on_its_own_name_and_the_user_barges_in(tmp_path: Path) -> None:
    _needs_models()
    over: dict[str, int] = {}

    def until(run: Run, tick: int) -> bool:  # the story's turn ended, and 2 s more were heard (no request from the echo)
        if run.daemon is None or run.daemon.turns < 2 or len(run.room.said) < 3:
            return False
        over.setdefault("tick", tick)
        return tick >= over["tick"] + 2 * RATE + int(FOLLOW_UP_S * RATE)

    run = Run(tmp_path, "auto", barge_in=True, until=until)
    run.go()
    turns, wakes = list(run.loop.turns), list(run.loop.wakes)
    assert len(run.llm.calls) == 2, run.llm.calls
    # (1) the first answer ("我是小智 ... 叫我小智") neither woke the daemon nor was taken as a follow-up
    assert len(turns) == 2, [t.text for t in turns]
    assert len(wakes) == 3, [(w.hit.text, w.barge_in) for w in wakes]
    first, story = turns
    assert not first.cancelled and first.result == "".join(ANSWER)
    # (2) the user's wake phrase in the second answer's playback was heard and stopped the speech
    assert not wakes[0].barge_in and not wakes[1].barge_in and wakes[2].barge_in
    assert story.cancelled and story.reason == "barge-in"
    end, start = run.room.heard.end_tick, run.story_from
    assert end is not None and start is not None
    print(f"speech stopped {(end - run.room.said[2]) / RATE:.2f} s after the user's wake phrase began, "
          f"{run.answer_s - (end - start) / RATE:.2f} s before the answer's end")
    assert end < start + int((run.answer_s - 1.0) * RATE)  # the rest of the answer was never played


class MuteCounter(EchoFilter):
    """The daemon's echo filter, counting the seconds of microphone its mute silenced (``muted_s``)."""

    muted_s = 0.0

    def process(self, frame: np.ndarray, start_tick: int) -> np.ndarray:
        if self.canceller is None and self.playing(start_tick, len(frame)):
            self.muted_s += len(frame) / RATE
        return super().process(frame, start_tick)


def test_with_aec_off_the_mute_keeps_the_daemon_from_waking_itself(tmp_path: Path, monkeypatch) -> None:
    _needs_models()
    monkeypatch.setattr(echo_module, "EchoFilter", MuteCounter)  # echo_filter() makes the daemon's
    run = Run(tmp_path, "off", barge_in=False, until=lambda run, _tick: len(run.room.said) >= 2)
    run.go()
    assert run.daemon is not None and run.daemon.listener is not None
    echo = run.daemon.listener.echo
    assert isinstance(echo, MuteCounter) and echo.canceller is None and echo.muted_s > 2.0
    turns, wakes = list(run.loop.turns), list(run.loop.wakes)
    assert len(turns) == 1 and len(wakes) == 1, ([t.text for t in turns], [w.hit.text for w in wakes])
    assert turns[0].result == "".join(ANSWER) and not turns[0].cancelled
