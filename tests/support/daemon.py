"""The real daemon on a scripted microphone: the product plan (supervisor, live hear loop, Assistant,
Speaker) with the microphone replaced by request WAVs fed at real-time pace (each request once the turn
before it is over) and the player by a null sink. The soak and the turn-latency bench run on it.

    work = isolated_workdir("soak")
    cfg = isolated_config(work)
    audio = synth_requests(cfg, texts, work)
    run = scripted_daemon(cfg, [audio[t] for t in texts], ScaledClock(1.0))
    run.on_turns(done=..., failed=...)
    code = run.daemon.run()
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.audio.players import Player
from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import Config, load_config
from rkvoice.daemon.sdnotify import Notifier
from rkvoice.daemon.service import Daemon
from rkvoice.stages import Plan, product_plan
from rkvoice.turn import Turn
from tests.support.clock import FakeClock, SleepyClock
from tests.support.feed import FRAME, RATE, paced


def isolated_workdir(name: str) -> Path:
    """A fresh temporary directory for one run's state, lock file and request WAVs."""
    return Path(tempfile.mkdtemp(prefix=f"rkvoice-{name}-"))


def isolated_config(work: Path, *overrides: dict[str, Any]) -> Config:
    """The portable profile's defaults (no user config files) with state and the daemon's lock under
    ``work``, then ``overrides`` (dicts of config sections, as ``load_config`` takes them)."""
    base = {"state": {"dir": str(work / "state")}, "daemon": {"lock_file": str(work / "rkvoice.lock")},
            "models": {"profile": "portable"}}
    return load_config([base, *overrides], files=None)


def synth_requests(cfg: Config, texts: list[str], out_dir: Path | None = None) -> dict[str, np.ndarray]:
    """16 kHz float32 speech for each text by the portable FastSpeech2 voice (also saved as
    ``request_<i>.wav`` in ``out_dir``)."""
    import soundfile as sf

    from rkvoice.hear.sources import to_mono_16k
    from rkvoice.text.normalize import speakable
    from rkvoice.tts.registry import create_tts

    tts = create_tts(cfg, "fastspeech2")
    tts.load()
    audio = {}
    for i, text in enumerate(texts):
        samples, rate = tts.generate(speakable(text))
        if out_dir is not None:
            sf.write(out_dir / f"request_{i}.wav", samples, rate)
        audio[text] = to_mono_16k(samples, rate, "request")
    return audio


class TurnFeeder:
    """A microphone stand-in: a quarter second of silence, request ``i``, a second of silence, then
    silence until the daemon has finished turn ``i``; then the next request. Never ends on its own
    (``close`` ends it). A hear loop restarted after a failed turn resumes at the next request."""

    sample_rate = RATE

    def __init__(self, script: list[np.ndarray], turns_done: Callable[[], int], clock: SleepyClock) -> None:
        self.script = script
        self.turns_done = turns_done
        self.clock = clock
        self._closed = threading.Event()
        self.fed = 0
        """Requests started so far."""

    def frames(self) -> Iterator[np.ndarray]:
        yield from paced(self._unpaced(), self.clock, self.clock.now(), FRAME / RATE, self._closed)

    def _unpaced(self) -> Iterator[np.ndarray]:
        silence = np.zeros(FRAME, dtype=np.float32)
        for i, speech in enumerate(self.script):
            if i < self.turns_done():
                continue
            padded = np.concatenate([np.zeros(RATE // 4, np.float32), speech, np.zeros(RATE, np.float32)])
            n = len(padded) // FRAME * FRAME
            self.fed = i + 1
            yield from padded[:n].reshape(-1, FRAME)
            while self.turns_done() < i + 1:  # the microphone stays open while the turn goes on
                yield silence.copy()
        while True:
            yield silence.copy()

    def close(self) -> None:
        self._closed.set()


@dataclass
class ScriptedDaemon:
    """A Daemon on a TurnFeeder. ``on_turns`` hooks its reports; ``daemon.run()`` runs it."""

    daemon: Daemon
    feeder: TurnFeeder

    def on_turns(self, done: Callable[[Turn], None], failed: Callable[[], None]) -> None:
        """``done(turn)`` after each turn the daemon reports answered, ``failed()`` after each failure it
        counts (a failure reported once stopping is not counted), each after the daemon's own report."""
        daemon = self.daemon
        report = daemon.report

        def on_report(result: Turn | BaseException) -> None:
            stopping = daemon.stop.is_set()
            report(result)
            if isinstance(result, Turn) and result.exception is None:
                done(result)
            elif not stopping:
                failed()

        daemon.report = on_report  # type: ignore[method-assign]


def scripted_daemon(cfg: Config, script: list[np.ndarray], clock: SleepyClock, *, drain: bool = True,
                    edit: Callable[[Plan], Plan] | None = None) -> ScriptedDaemon:
    """The product's daemon on ``cfg`` hearing ``script`` (16 kHz requests) on ``clock``. With ``drain``
    the null player takes audio at once (first audio = first PCM handed over; turns end when the answer
    is synthesised), else it plays at ``clock``'s pace. ``edit`` may swap stages of the product plan."""
    holder: list[Daemon] = []
    feeder = TurnFeeder(script, lambda: holder[0].turns if holder else 0, clock)

    def player(c: Config) -> Player:
        opened = NullPlayer(c, FakeClock() if drain else clock)
        opened.open()
        return opened

    plan = product_plan(cfg, source=lambda _c: feeder, player=player)
    if edit is not None:
        plan = edit(plan)
    daemon = Daemon(cfg, plan, lambda: cfg, notifier=Notifier(socket_name=""))
    holder.append(daemon)
    return ScriptedDaemon(daemon, feeder)
