"""The satellite's own sounds (rkvoice.satellite.sounds, ``satellite.sounds``) on the core, driven on a
controlled clock with a player that keeps what it was given: the wake cue when a request begins, the
thinking sound when its audio ends, the error sound when a run fails (Home Assistant's error, no
transcript in time), the timer sound after a finished timer's words; each one off leaves it out and
nothing else; a reply that begins while the thinking sound still sounds cuts it and never waits; an
unknown sound's name is one config error naming the allowed ones."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from fakes import RecordingPlayer, wait_until

from rkvoice.config import Config, load_config
from rkvoice.config_ha import DEVICE_SOUNDS
from rkvoice.errors import RkvoiceError
from rkvoice.hear.cue import chime
from rkvoice.hear.wake import WakeHit
from rkvoice.satellite.core import SatelliteCore
from rkvoice.satellite.mic import SatelliteMic
from rkvoice.satellite.playback import Playback, Stream
from rkvoice.satellite.sounds import Sound, error_sound, thinking_sound, timer_sound
from rkvoice.satellite.state import Heard, SatelliteState
from rkvoice.satellite.timers import FINISHED_WORDS
from tests.support.clock import ManualClock
from tests.support.stop_rig import FRAME, Link, Port

RING_THREAD = "rkvoice-timer-ring"


class KeptPlayer(RecordingPlayer):
    """A RecordingPlayer that also keeps the blocks it was given."""

    def __init__(self, cfg: Config, clock: ManualClock) -> None:
        super().__init__(cfg, clock)
        self.kept: list[np.ndarray] = []

    def write(self, block: np.ndarray) -> None:
        super().write(block)
        self.kept.append(block.copy())

    def heard(self) -> np.ndarray:
        return np.concatenate(self.kept) if self.kept else np.zeros(0, np.int16)


class GateSpeaker:
    """The board's voice: saying anything takes until ``said`` is set (or a clear cancels it)."""

    def __init__(self) -> None:
        self.said = threading.Event()

    def speak(self, text: str) -> int:
        return 1

    def wait(self, turn: int, timeout: float | None) -> bool:
        return self.said.wait(timeout)

    def cancel_all(self, reason: str) -> None:
        self.said.set()


class NoWake:
    """The wake engine SatelliteMic holds; these tests tell the core what was heard themselves."""

    def load(self) -> None: ...

    def restart(self, at_sample: int) -> None: ...

    def accept(self, frame: np.ndarray) -> WakeHit | None:
        return None

    def flush(self) -> WakeHit | None:
        return None


@dataclass
class Rig:
    clock: ManualClock
    player: KeptPlayer
    playback: Playback
    core: SatelliteCore
    cue: np.ndarray

    def pcm(self, *sounds: np.ndarray) -> np.ndarray:
        """What the player gets for ``sounds`` played one after another."""
        x = np.concatenate([np.zeros(0, np.float32), *sounds])
        return np.clip(np.round(x * 32767.0), -32768, 32767).astype(np.int16)

    def plays(self, *sounds: np.ndarray) -> bool:
        """Whether the player was given exactly ``sounds``, in order (waited for)."""
        want = self.pcm(*sounds)
        return wait_until(lambda: np.array_equal(self.player.heard(), want), 2.0)

    def wake(self) -> None:
        self.core.on_heard(Heard(0, np.zeros(FRAME, np.float32), hit=WakeHit(0.03, 0.03, "小智小智")))

    def speech_end(self) -> None:
        self.core.on_heard(Heard(FRAME, np.zeros(FRAME, np.float32), speech_end_s=0.06))

    def reply(self) -> Stream:
        """Home Assistant's answer: its transcript, what it says, and 0.5 s of its audio."""
        self.core.pipeline_started()
        self.core.heard("现在几点")
        self.core.answering("三点")
        stream = self.core.stream_start(self.player.rate, 2, 1)
        assert stream is not None
        self.playback.chunk(stream, np.full(self.player.rate // 2, 3000, "<i2").tobytes())
        self.playback.end(stream)
        return stream


def make_rig(sounds: tuple[str, ...] | None = None, speaker: GateSpeaker | None = None) -> Rig:
    cfg = load_config()
    clock = ManualClock()
    player = KeptPlayer(cfg, clock)
    playback = Playback(player, speaker, clock=clock)  # type: ignore[arg-type]
    playback.start()
    core = SatelliteCore(Port(), playback, clock)  # no loop: the core acts inline
    cue = chime(player.rate)
    SatelliteMic(NoWake(), Link(core), playback, cue=cue, sounds=sounds)
    core.run_satellite()
    return Rig(clock, player, playback, core, cue)


@pytest.fixture
def rigs() -> Iterator[list[Rig]]:
    made: list[Rig] = []
    yield made
    for rig in made:
        rig.core.ringer.stop("test over")
        rig.playback.close()
    assert wait_until(lambda: not any(t.name == RING_THREAD for t in threading.enumerate()))


def only_without(off: Sound | None) -> tuple[str, ...]:
    return tuple(s.value for s in Sound if s is not off)


def test_the_config_names_the_same_sounds_as_the_satellite():
    assert DEVICE_SOUNDS == tuple(Sound)
    assert load_config().satellite.sound_names == DEVICE_SOUNDS  # all on by default


@pytest.mark.parametrize("off", [None, *Sound])
def test_wake_thinking_and_error_each_play_at_their_moment_unless_off(rigs, off):
    rig = make_rig(only_without(off))
    rigs.append(rig)
    rate = rig.player.rate
    on = {s: s is not off for s in Sound}
    wake = rig.cue if on[Sound.WAKE] else np.zeros(0, np.float32)
    thinking = thinking_sound(rate) if on[Sound.THINKING] else np.zeros(0, np.float32)
    error = error_sound(rate) if on[Sound.ERROR] else np.zeros(0, np.float32)
    rig.wake()
    assert rig.core.state is SatelliteState.STREAMING
    assert rig.plays(wake)
    rig.speech_end()  # the board's VAD ended the request
    assert rig.core.state is SatelliteState.AWAITING_REPLY
    assert rig.plays(wake, thinking)
    rig.core.failed("no text recognized", "stt-no-text-recognized")
    assert rig.plays(wake, thinking, error)
    rig.core.failed("the run ended without a transcript", "run-end")  # the same run again: no second sound
    assert not wait_until(lambda: len(rig.player.heard()) > len(rig.pcm(wake, thinking, error)), 0.3)


def test_the_thinking_sound_plays_when_home_assistant_ends_the_request_too(rigs):
    rig = make_rig()
    rigs.append(rig)
    rig.wake()
    rig.core.pipeline_started()
    rig.core.heard("现在几点")  # HA's VAD ended it: the transcript while the board still streams
    assert rig.core.run is None
    assert rig.plays(rig.cue, thinking_sound(rig.player.rate))


@pytest.mark.parametrize("on", [True, False])
def test_no_transcript_in_time_is_the_error_sound(rigs, on):
    rig = make_rig(("error",) if on else ())
    rigs.append(rig)
    rig.core.max_request_s, rig.core.answer_wait_s = 0.05, 0.05
    rig.wake()
    rig.speech_end()
    run = rig.core.run
    assert run is not None
    rig.core.on_heard(Heard(FRAME * 8, np.zeros(FRAME, np.float32)))  # 0.29 s: past both waits
    assert run.ended == "no transcript" and rig.core.state is SatelliteState.IDLE
    error = error_sound(rig.player.rate) if on else np.zeros(0, np.float32)
    assert rig.plays(error)
    rig.core.failed("too late", "timeout")  # HA's error for the run given up on: no second sound
    assert run.error is not None
    assert not wait_until(lambda: len(rig.player.heard()) > len(error), 0.3)


def test_a_failure_after_the_transcript_is_the_error_sound(rigs):
    """Speech-to-text worked, the agent or the voice failed: the request still failed."""
    rig = make_rig(("error",))
    rigs.append(rig)
    rig.wake()
    rig.speech_end()
    rig.core.pipeline_started()
    rig.core.heard("现在几点")
    rig.core.failed("the agent failed", "intent-failed")
    assert rig.plays(error_sound(rig.player.rate))


def test_a_finished_timer_rings_with_its_sound(rigs):
    rig = make_rig()
    rigs.append(rig)
    words = f"面条，{FINISHED_WORDS}"
    rig.core.ring(words)
    ring = rig.core.ringer.last
    assert ring is not None and wait_until(lambda: ring.rings == 1 and ring.pending.is_set())
    assert rig.plays(timer_sound(rig.player.rate)) and rig.playback.said == [words]
    assert rig.core.state is SatelliteState.RINGING


def test_with_the_timer_sound_off_its_words_are_said_once_and_the_ring_ends(rigs):
    voice = GateSpeaker()
    rig = make_rig(("wake", "thinking", "error"), voice)
    rigs.append(rig)
    states: list[str] = []
    rig.core.on_state = lambda state: states.append(state.value)
    rig.core.ring(FINISHED_WORDS)
    ring = rig.core.ringer.last
    assert ring is not None and ring.thread is not None
    thread = ring.thread
    assert wait_until(lambda: rig.playback.said == [FINISHED_WORDS])
    assert rig.core.state is SatelliteState.RINGING and rig.core.job().stop_word  # while it is said
    voice.said.set()
    assert wait_until(lambda: not thread.is_alive())  # the clock never moved: no gap waited out
    assert rig.playback.said == [FINISHED_WORDS] and ring.rings == 1
    assert not np.any(rig.player.heard())  # no beep: one block of silence after the words, nothing else
    assert not rig.core.ringer.ringing and rig.core.state is SatelliteState.IDLE
    assert states == ["ringing", "idle"]


def test_a_reply_that_begins_while_the_thinking_sound_plays_cuts_it_and_never_waits(rigs):
    rig = make_rig(("thinking",))
    rigs.append(rig)
    rig.wake()
    rig.speech_end()
    assert wait_until(lambda: rig.player.samples > 0)  # the thinking sound is with the player at t = 0
    assert rig.player.segments[0][1] > 0.05
    stream = rig.reply()  # at once (the clock has not moved): the answer starts now, not after the sound
    assert wait_until(lambda: rig.player.samples == len(thinking_sound(rig.player.rate)) + rig.player.rate // 2)
    thinking, answer = rig.player.segments
    assert thinking == [0.0, 0.0]  # cut where it was
    assert answer[0] == 0.0 and answer[1] == pytest.approx(0.5)
    assert not stream.cut


def test_a_reply_after_the_thinking_sound_lets_it_play_whole(rigs):
    rig = make_rig(("thinking",))
    rigs.append(rig)
    rig.wake()
    rig.speech_end()
    think_s = len(thinking_sound(rig.player.rate)) / rig.player.rate
    assert wait_until(lambda: rig.player.samples > 0)
    rig.clock.advance_to(1.2)  # Home Assistant answers over a second later
    stream = rig.reply()
    assert wait_until(lambda: len(rig.player.segments) == 2 and rig.player.segments[1][1] > 1.2)
    thinking, answer = rig.player.segments
    assert thinking == [0.0, pytest.approx(think_s)]
    assert answer[0] == 1.2 and not stream.cut


def test_an_unknown_sound_is_one_config_error_naming_the_allowed_ones():
    with pytest.raises(RkvoiceError) as err:
        load_config([{"satellite": {"sounds": "wake,beep"}}])
    message = str(err.value)
    assert "satellite.sounds" in message and "'beep'" in message
    assert all(name in message for name in DEVICE_SOUNDS)
    assert load_config([{"satellite": {"sounds": ""}}]).satellite.sound_names == ()
    assert load_config([{"satellite": {"sounds": "timer， error"}}]).satellite.sound_names == ("timer", "error")
