"""A finished timer's ring (rkvoice.satellite.timers.TimerRing, owned by the satellite core): the words
once, then the timer sound again after each gap until the stop word, a wake, or 15 minutes, on a
controlled clock; the core stays "ringing" throughout and hears the stop word in the gaps too; the
portable voice's 别说了 ends it; no ring thread is left."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from fakes import RecordingPlayer, wait_until

from rkvoice.config import load_config
from rkvoice.hear.sources import to_mono_16k
from rkvoice.hear.vad import vad_model_path
from rkvoice.hear.wake import WakeHit
from rkvoice.satellite.core import SatelliteCore
from rkvoice.satellite.playback import Playback
from rkvoice.satellite.state import Heard, SatelliteState
from rkvoice.satellite.timers import FINISHED_WORDS, RING_GAP_S, RING_MAX_S, Ringing, TimerRing, timer_sound
from tests.support.clock import ManualClock
from tests.support.media_site import KeepingPlayer
from tests.support.stop_rig import FRAME, Port, StopRig, silence

RING_THREAD = "rkvoice-timer-ring"
WORDS = f"面条，{FINISHED_WORDS}"


@dataclass
class Rig:
    clock: ManualClock
    player: RecordingPlayer
    playback: Playback
    core: SatelliteCore
    states: list[str]

    def in_gap(self, ring: Ringing, rings: int) -> bool:
        """``ring`` has handed its ``rings``-th sound to the player and waits out the gap."""
        return ring.rings == rings and ring.pending.is_set() and self.clock.blocked(RING_THREAD)

    def next_ring(self) -> None:
        self.clock.advance_to(self.clock.now() + RING_GAP_S)


@pytest.fixture
def rig() -> Iterator[Rig]:
    clock = ManualClock()
    player = RecordingPlayer(load_config(), clock)
    playback = Playback(player, None, clock=clock)
    playback.start()
    core = SatelliteCore(Port(), playback, clock)  # no loop: the core acts inline
    states: list[str] = []
    core.on_state = lambda state: states.append(state.value)
    core.run_satellite()
    yield Rig(clock, player, playback, core, states)
    core.ringer.stop("test over")
    playback.close()
    assert wait_until(lambda: not ring_threads())


def ring_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == RING_THREAD]


def test_it_rings_after_each_gap_and_stops_by_itself_after_15_minutes(rig):
    rig.core.ring(WORDS)
    ring = rig.core.ringer.last
    assert ring is not None and ring.thread is not None
    sound = len(timer_sound(rig.player.rate))
    for rings in (1, 2, 3):
        assert wait_until(lambda: rig.in_gap(ring, rings)), ring.rings  # noqa: B023 -- waited on at once
        assert rig.player.samples == rings * sound  # the timer sound each time
        assert rig.core.state is SatelliteState.RINGING
        assert rig.core.job().stop_word  # nothing plays in the gap, and the stop word still listens
        if rings < 3:
            rig.next_ring()
    assert rig.playback.said == [WORDS]  # the words once
    rig.clock.advance_to(RING_MAX_S)
    assert wait_until(lambda: not ring.thread.is_alive())
    assert ring.rings == 3 and not rig.core.ringer.ringing and rig.core.state is SatelliteState.IDLE
    assert rig.states == ["idle", "ringing", "idle"]
    assert not rig.core.job().stop_word


def test_just_before_15_minutes_it_still_rings(rig):
    rig.core.ring(WORDS)
    ring = rig.core.ringer.last
    assert wait_until(lambda: rig.in_gap(ring, 1))
    rig.clock.advance_to(RING_MAX_S - 0.5)
    assert wait_until(lambda: rig.in_gap(ring, 2))
    rig.next_ring()
    assert wait_until(lambda: not ring.thread.is_alive())
    assert ring.rings == 2 and rig.core.state is SatelliteState.IDLE


def test_the_stop_word_ends_it_in_a_gap(rig):
    stops: list[bool] = []
    rig.core.on_stop = lambda: stops.append(True)
    rig.core.ring(WORDS)
    ring = rig.core.ringer.last
    assert wait_until(lambda: rig.in_gap(ring, 1))
    rig.core.on_heard(Heard(0, np.zeros(FRAME, np.float32), stop=WakeHit(0.5, 0.4, "别说了")))
    assert wait_until(lambda: not ring.thread.is_alive())  # the gap's wait ends at once: the clock never moved
    assert stops == [True] and ring.rings == 1 and rig.core.state is SatelliteState.IDLE
    assert rig.states == ["idle", "ringing", "idle"]


def test_a_wake_ends_it_and_the_request_goes_on(rig):
    rig.core.ring(WORDS)
    ring = rig.core.ringer.last
    assert wait_until(lambda: rig.in_gap(ring, 1))
    rig.core.on_heard(Heard(0, np.zeros(FRAME, np.float32), hit=WakeHit(0.5, 0.4, "小智小智")))
    assert wait_until(lambda: not ring.thread.is_alive())
    assert not rig.core.ringer.ringing and rig.core.state is SatelliteState.STREAMING


def test_a_timer_finishing_while_one_rings_takes_its_place(rig):
    rig.core.ring(WORDS)
    first = rig.core.ringer.last
    assert wait_until(lambda: rig.in_gap(first, 1))
    rig.core.ring(FINISHED_WORDS)
    second = rig.core.ringer.last
    assert second is not first and wait_until(lambda: not first.thread.is_alive())
    assert wait_until(lambda: rig.in_gap(second, 1))
    assert rig.playback.said == [WORDS, FINISHED_WORDS] and rig.core.state is SatelliteState.RINGING
    assert len(ring_threads()) == 1
    rig.core.ringer.stop("test")
    assert wait_until(lambda: not second.thread.is_alive()) and rig.core.state is SatelliteState.IDLE


def test_stopping_what_does_not_ring_is_nothing():
    clock = ManualClock()
    playback = Playback(RecordingPlayer(load_config(), clock), None, clock=clock)
    assert not TimerRing(playback, clock).stop("a stop word with nothing ringing")


def test_the_portable_voice_saying_the_stop_phrase_ends_a_ringing_timer(hear_asr, hear_voice):
    """The real stop word (Whisper, the phrase segmenter) over the ring, sounding at real-time pace."""
    cfg = load_config()
    if not vad_model_path(cfg).is_file():
        pytest.skip("silero VAD model is absent (run ./install.sh)")
    audio, rate = hear_voice.generate("别说了")
    phrase = to_mono_16k(audio, rate)
    rig = StopRig(cfg, hear_asr, KeepingPlayer())
    try:
        rig.core.ring(WORDS)
        ring = rig.core.ringer.last
        assert ring is not None and wait_until(lambda: ring.rings >= 1)
        rig.hear(np.concatenate([silence(0.8), phrase, silence(1.5)]))
        assert len(rig.stops) == 1, rig.engine.last_text
        assert wait_until(lambda: not ring.thread.is_alive())
        rings = ring.rings
        assert not rig.core.ringer.ringing and rig.core.state is SatelliteState.IDLE
        assert not wait_until(lambda: ring.rings > rings, 0.5)
    finally:
        rig.core.ringer.stop("test over")
        rig.close()
    assert wait_until(lambda: not ring_threads())
