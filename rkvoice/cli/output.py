"""Where a CLI run's speech goes (player, WAV file or both), and the checks made before any model loads."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rkvoice.audio.players import PLAYERS, Player, choose_player
from rkvoice.audio.sinks import NullPlayer, TeePlayer, WavPlayer
from rkvoice.clock import Clock
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.stages import Speak
from rkvoice.tts.base import TtsEngine

log = logging.getLogger(__name__)


def check_outputs(args: argparse.Namespace) -> None:
    """--out and --metrics must be writable before any model loads."""
    for flag, path in ((f, Path(p)) for f, p in (("--out", args.out), ("--metrics", args.metrics)) if p):
        if path.is_dir():
            raise RkvoiceError(Stage.INPUT, "bad-path", f"{flag} {path} is a directory; give a file name")
        if not path.parent.is_dir() or not os.access(path.parent, os.W_OK | os.X_OK):
            raise RkvoiceError(Stage.INPUT, "unwritable",
                               f"cannot write {flag} {path}: {path.parent} is not a writable folder")


@dataclass
class Output:
    """The player the speaker writes into, its parts, and the WAV recorder (if any)."""

    player: Player
    wav: WavPlayer | None = None
    wav_announce: bool = False
    parts: list[Player] = field(default_factory=list)

    def report(self) -> None:
        """Say where the speech was written, when it went to a WAV file."""
        if self.wav is not None:
            prefix = "no sound device: " if self.wav_announce else ""
            print(f"{prefix}wrote {self.wav.path} ({self.wav.samples / self.wav.rate:.1f} s)")


def open_output(args: argparse.Namespace, cfg: Config, clock: Clock) -> Output:
    wav = WavPlayer(cfg, path=args.out) if args.out else None
    announce = False
    main_player: Player | None = None
    if args.no_play:
        main_player = NullPlayer(cfg, clock)
    elif (name := choose_player(cfg, daemon=False)) != "wav":
        main_player = PLAYERS.create(name, cfg, clock)
    elif wav is None:  # no sound device (or audio.player=wav): the speech goes to a file
        wav = WavPlayer(cfg)
        announce = True
    parts: list[Player] = [p for p in (main_player, wav) if p is not None]
    player = parts[0] if len(parts) == 1 else TeePlayer(*parts)
    opened: list[Player] = []
    try:
        for part in parts:
            part.open()
            opened.append(part)
    except BaseException:
        for part in opened:
            getattr(part, "abort", lambda: None)()
        raise
    return Output(player, wav, announce, parts)


@contextmanager
def speaking(args: argparse.Namespace, cfg: Config, clock: Clock, tts: Callable[[Config], TtsEngine],
             cue: bool = False) -> Iterator[tuple[Speak, Output]]:
    """The Speak stage (voice ``tts``, ``cue`` or not) into this run's output, loaded, for one CLI run.
    Afterwards every output is closed (the WAV renamed into place); on any error or Ctrl-C every turn
    is cancelled and the WAV file dropped."""
    opened: list[Output] = []

    def player(c: Config) -> Player:
        opened.append(open_output(args, c, clock))
        return opened[0].player

    speak = Speak(cfg, player, tts, clock, cue)
    try:
        speak.load()
        assert speak.speaker is not None
        yield speak, opened[0]
        speak.speaker.close()
        for part in opened[0].parts:
            part.close()
    except BaseException:
        if speak.speaker is not None:
            speak.speaker.cancel_all("error")
            speak.speaker.close(timeout=1.0)
        if opened and opened[0].wav is not None:
            opened[0].wav.abort()
        raise
