"""The satellite's core, below any protocol: wake, end of speech, streaming the request, playback of
replies and announcements, timers, in one state machine (``SatelliteState``) on one event loop.

Who calls what, on which thread:

- the protocol adapter (rkvoice.satellite.link: Wyoming) runs the loop. It tells the core what the
  peer said (``run_satellite``, ``pause``, ``pipeline_started``, ``heard``, ``failed``, ``stream_*``,
  ``ring``...) and the core asks it to send (``SatellitePort``: ask for a pipeline, audio, its end,
  ``played``);
- the microphone thread only posts frames (``feed.post_frame``, rkvoice.satellite.feed); hearing them
  (the wake engine, the board's VAD: blocking inference) runs on one hear thread, as the loop tells it
  (``Job``), and what it heard comes back to the loop (``on_heard``);
- playback (its own thread) tells the loop when a sound has played (``post``);
- the device's own sounds (``sounds``, rkvoice.satellite.sounds): the wake cue when a request begins,
  the thinking sound when its audio ends (a reply cuts it), the error sound when a run fails, the
  timer sound of a finished timer; each can be off (``satellite.sounds``).

Without a loop (tests that drive the core on one thread) every call runs inline. HA's events carry no
run id: they belong to the pipeline HA runs now, and HA starts its pipelines in the order they were
asked (each with ``transcribe``), so the runs asked wait in a queue and a late transcript is never
credited to a run asked after it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from rkvoice.clock import Clock, MonotonicClock

from .feed import FrameFeed
from .playback import Playback, Stream, StreamKind
from .sounds import DeviceSounds
from .state import RATE, Heard, Job, Run, SatellitePort, SatelliteState
from .timers import TimerRing

log = logging.getLogger(__name__)

KEEP_RUNS = 64  # runs remembered (a daemon runs for weeks)
MAX_REQUEST_S = 15.0
"""Longest a request is streamed before the satellite sends ``audio-stop`` itself (HA's VAD normally
ends it first)."""
ANSWER_WAIT_S = 15.0
"""After ``audio-stop``: how long the satellite waits for HA's transcript before it listens for the wake again."""


class SatelliteCore:
    """The state machine. Every method but ``post`` (and its ``feed``'s ``post_frame``) runs on the loop
    (or, without one, on the one thread that drives the core)."""

    def __init__(self, port: SatellitePort, playback: Playback, clock: Clock | None = None) -> None:
        self.port = port
        self.playback = playback
        self.clock = clock or MonotonicClock()
        self.state = SatelliteState.MUTED
        self.connected = False
        self.running = threading.Event()
        """The peer runs the satellite (after run-satellite, not paused since); set and cleared on the loop,
        waited on by anyone."""
        self.run: Run | None = None
        """The run streaming or waiting for its transcript."""
        self.runs: list[Run] = []
        """The last runs, oldest first."""
        self.on_run: Callable[[Run], None] | None = None
        self.cue = np.zeros(0, np.float32)
        self.sounds = DeviceSounds(playback, self.clock)
        """The device's own sounds that are on (rkvoice.satellite.mic sets ``satellite.sounds``'s)."""
        self.max_request_s = MAX_REQUEST_S
        self.answer_wait_s = ANSWER_WAIT_S
        self.on_state: Callable[[SatelliteState], None] | None = None
        self.on_connection: Callable[[bool], None] | None = None
        """Told when the peer connects (True) or leaves (False)."""
        self.on_stop: Callable[[], None] | None = None
        """Told when a stop phrase cleared the playback (the link stops its media player, a ringing timer)."""
        self.heard_to = 0
        """Stream sample up to which the frames heard were acted on."""
        self._run_ids = 1
        self._asked: deque[Run] = deque()  # runs asked whose pipeline the peer has not started
        self._peer_run: Run | None = None  # the run of the pipeline the peer runs now
        self._run_from = 0  # stream sample where the current run's streaming began
        self._restart_wake = False
        self._vad_head: np.ndarray | None = None
        self._reply_due = False  # a synthesize came: the next stream is the run's reply
        self._sounds: dict[int, SatelliteState] = {}  # sounds queued and not played out, by id
        self._sound_ids = 0
        self.ringer = TimerRing(playback, self.clock, lambda: self.post(self._ring_changed))
        """A finished timer's ring (until the stop word, a wake, or its 15 minutes)."""
        self.feed = FrameFeed(self)
        """The loop, and the hear thread the microphone's frames go to (its ``hearing``, ``busy``, ``on_error``)."""
        playback.on_played = lambda stream: self.post(self._played, stream)
        playback.on_said = lambda sound_id: self.post(self._said, sound_id)

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """From any thread: ``fn(*args)`` on the loop (inline without one)."""
        self.feed.post(fn, *args)

    # -- hearing ---------------------------------------------------------------------------------

    def job(self) -> Job:
        """What the hear thread does with the next frame."""
        job = Job(wake=self.run is None, restart_wake=self._restart_wake, vad_head=self._vad_head,
                  stop_word=self.run is None and (self.playback.playing or self.ringer.ringing))
        self._restart_wake, self._vad_head = False, None
        return job

    def hearing_failed(self) -> None:
        """A frame could not be heard: the wake engine starts afresh at the next."""
        self._restart_wake = True

    def on_heard(self, heard: Heard) -> None:
        run = self.run
        if run is not None:
            self._stream(run, heard)
        elif heard.hit is not None:
            self._woke(heard)
        elif heard.stop is not None:
            self._stop_word(heard)
        self.heard_to = heard.end

    def _stop_word(self, heard: Heard) -> None:
        """A stop phrase while something played: it ends (and whatever ``on_stop`` ends with it)."""
        log.info("satellite: stop word %r at %.2f s", heard.stop.text, heard.end / RATE)
        self.playback.clear("stop word")
        self.ringer.stop("stop word")
        if self.on_stop is not None:
            self.on_stop()

    def _stream(self, run: Run, heard: Heard) -> None:
        streamed_s = (heard.end - self._run_from) / RATE
        if not run.audio_stopped and streamed_s > self.max_request_s:
            log.info("satellite: run %d: %.0f s of request audio; audio-stop", run.id, self.max_request_s)
            self._stop_audio(run)
        elif run.audio_stopped and streamed_s > self.max_request_s + self.answer_wait_s:
            log.warning("satellite: run %d: Home Assistant sent no transcript within %.0f s of the request's end; "
                        "listening for the wake phrase again", run.id, self.answer_wait_s)
            run.finish("no transcript")
            self.sounds.failed()
            self._listen()
        elif not run.audio_stopped:
            self._audio(run, heard.frame)
            if heard.speech_end_s is not None:
                log.info("satellite: run %d: end of speech at %.2f s (the board's VAD); audio-stop", run.id,
                         heard.speech_end_s)
                self._stop_audio(run)

    def _woke(self, heard: Heard) -> None:
        hit, head = heard.hit, heard.head if heard.head is not None else np.zeros(0, np.float32)
        self.ringer.stop("wake")
        if self.playback.playing:
            self.playback.clear("barge-in")
        log.info("satellite: wake %r at %.2f s%s", hit.text, hit.at_s, f", request {hit.request!r}" if hit.request else "")
        if not self.running.is_set():
            log.warning("satellite: heard the wake phrase, but Home Assistant is %s; request dropped",
                        "not connected" if not self.connected else "not running the satellite (paused)")
            self._restart_wake = True
            return
        run = self.begin_run(head, heard.end, heard.one_breath)
        if run is not None and self.on_run is not None:
            self.on_run(run)

    def begin_run(self, head: np.ndarray, at: int = 0, one_breath: bool = False) -> Run | None:
        """A request begins at stream sample ``at`` with ``head`` (16 kHz float32 heard since the wake
        phrase; with ``one_breath`` the whole request): the peer's pipeline is asked. None when the peer
        does not run the satellite."""
        if not self.running.is_set():
            return None
        run = Run(self._run_ids, self.clock.now())
        self._run_ids += 1
        for old in self.runs:
            old.finish("replaced")
        self.runs.append(run)
        del self.runs[:-KEEP_RUNS]
        self._asked.append(run)
        self.run, self._run_from = run, at
        self.port.ask(run)
        log.info("satellite: run %d: asking Home Assistant's pipeline", run.id)
        self._audio(run, head)
        self.sounds.wake(self.cue)
        if one_breath:
            self._audio(run, np.zeros(RATE // 4, np.float32))  # a little silence: HA's VAD sees the end
            self._stop_audio(run)
        else:
            self._vad_head = head
        self._settle()
        return run

    def _audio(self, run: Run, samples: np.ndarray) -> None:
        if run.over.is_set() or run.audio_stopped or not len(samples):
            return
        at = run.sent_s
        run.sent_s += len(samples) / RATE
        self.port.audio(run, samples, at)

    def _stop_audio(self, run: Run, thinking: bool = True) -> None:
        """The request's audio ends (``thinking``: the answer is awaited, the thinking sound plays)."""
        if run.audio_stopped:
            return
        run.audio_stopped = True
        if run.speech_end_at is None:
            run.speech_end_at = self.clock.now()
        self.port.stop_audio(run)
        if thinking:
            self.sounds.think()
        self._settle()

    def _listen(self, thinking: bool = False) -> None:
        """The current run is over: its audio stops, the wake engine listens again."""
        run, self.run = self.run, None
        if run is not None and not run.audio_stopped:
            self._stop_audio(run, thinking)
        self._restart_wake = True
        self._settle()

    def listen_afresh(self) -> None:
        """A new source: the wake engine starts afresh at its first frame."""
        self._restart_wake = True

    def source_ended(self) -> None:
        """The microphone's source ended: the request streaming stops."""
        if self.run is not None and not self.run.audio_stopped:
            self._stop_audio(self.run)

    # -- the peer ----------------------------------------------------------------------------------

    def connect(self) -> None:
        self.connected = True
        if self.on_connection is not None:
            self.on_connection(True)

    def disconnect(self) -> None:
        self.connected = False
        self._stop_running("disconnected")
        if self.on_connection is not None:
            self.on_connection(False)

    def run_satellite(self) -> None:
        self.running.set()
        self._settle()

    def pause(self) -> None:
        self._stop_running("paused")

    def _stop_running(self, why: str) -> None:
        """The peer no longer runs the satellite: every run not over ends, the request streaming stops."""
        self.running.clear()
        ending = [run for run in self.runs if not run.over.is_set()]
        self._asked.clear()
        self._peer_run = None
        for run in ending:
            run.finish(why)
        if self.run is not None:
            self._listen()
        self._settle()

    def pipeline_started(self) -> None:
        """``transcribe``: the peer started the pipeline of the oldest run asked."""
        run = self._asked.popleft() if self._asked else None
        self._peer_run = run
        if run is None:
            log.warning("satellite: Home Assistant started a pipeline the satellite did not ask for; its events "
                        "are ignored")
            return
        run.transcribing = True

    def speech_ended(self) -> None:
        run = self._peer_run
        if run is not None and run.speech_end_at is None:
            run.speech_end_at = self.clock.now()

    def _pipeline_run(self) -> Run | None:
        """The run a transcript or error is of: the peer's current one, else (the peer failed before its
        speech-to-text) the oldest asked."""
        if self._peer_run is None and self._asked:
            self._peer_run = self._asked.popleft()
        return self._peer_run

    def heard(self, text: str) -> None:
        """``transcript``."""
        run = self._pipeline_run()
        if run is None:
            log.warning("satellite: Home Assistant heard %r for no run the satellite asked; ignored", text)
            return
        if run.transcript is None:
            run.transcript, run.transcribing, run.heard_at = text, True, self.clock.now()
        if not run.finish("transcript"):
            log.info("satellite: Home Assistant heard %r for run %d, which had ended (%s); credited to it alone",
                     text, run.id, run.ended)
            return
        log.info("satellite: Home Assistant heard %r", text)
        if run is self.run:
            self._listen(thinking=True)

    def failed(self, text: str, code: str) -> None:
        """``error``."""
        log.warning("satellite: Home Assistant's pipeline failed: %s (%s)", text, code)
        run = self._pipeline_run()
        if run is None:
            return
        if run.error is None and run.ended in ("", "transcript"):  # its first failure, not a run left behind
            self.sounds.failed()
        if run.error is None:
            run.error = f"{text} ({code})"
        run.finish("error")
        if run is self.run:
            self._listen()

    def answering(self, text: str) -> None:
        """``synthesize``: the peer says what its reply is."""
        log.info("satellite: Home Assistant answers %r", text)
        run = self._peer_run
        self._reply_due = run is None or run.reply is None  # else it names the answer already streaming

    def stream_start(self, rate: int, width: int, channels: int) -> Stream | None:
        """The peer's audio begins: the run's reply, or (no run waits for one) an announcement."""
        run = self._peer_run
        answering = run is not None and run.transcribing and run.error is None and run.reply is None
        # a synthesize came, or HA streams its answer before saying what it synthesises (an agent that
        # streams its text): the run's reply; audio with neither is an announcement (or a timer's sound)
        kind = StreamKind.REPLY if self._reply_due or answering else StreamKind.ANNOUNCE
        self._reply_due = False
        if kind is StreamKind.REPLY and self.sounds.thinking_sounds():
            self.playback.clear("the reply begins: the thinking sound is cut")  # the answer never waits for it
        stream = self.playback.begin(rate, width, channels, kind)
        if stream is None:
            return None
        if kind is StreamKind.REPLY and run is not None and run.reply is None:
            run.reply = stream
        self._sounds[-stream.id] = SatelliteState.RESPONDING if kind is StreamKind.REPLY else SatelliteState.ANNOUNCING
        self._settle()
        return stream

    def ring(self, words: str) -> None:
        """A finished timer: the board says ``words``, then rings (``ringer``; with the timer sound off the
        words alone)."""
        self.ringer.start(words, self.sounds.timer)

    def _ring_changed(self) -> None:
        if self.ringer.ringing:
            self._sounds[0] = SatelliteState.RINGING  # (0: no sound's id)
        else:
            self._sounds.pop(0, None)
        self._settle()

    def _played(self, stream: Stream) -> None:
        self._sounds.pop(-stream.id, None)
        self.port.played(stream)
        self._settle()

    def _said(self, sound_id: int) -> None:
        self._sounds.pop(sound_id, None)
        self._settle()

    def _settle(self) -> None:
        """The state from what is going on (a transition is logged)."""
        if not self.running.is_set():
            state = SatelliteState.MUTED
        elif self.run is not None:
            state = SatelliteState.AWAITING_REPLY if self.run.audio_stopped else SatelliteState.STREAMING
        elif self._sounds:
            state = list(self._sounds.values())[-1]
        else:
            state = SatelliteState.IDLE
        if state is not self.state:
            log.debug("satellite: %s -> %s", self.state, state)
            self.state = state
            if self.on_state is not None:
                self.on_state(state)
