"""Audio sinks for the speaker: the ``Player`` protocol, the player registry (aplay, sounddevice,
wav, null), each with what it needs, and ``choose_player``: the one place ``audio.player=auto``
is resolved, for the daemon and for command-line runs.

Every player takes mono int16 blocks at ``rate`` and offers:

- ``open()`` (heavy part: start the process / stream / file), ``close()``;
- ``write(block)``: hand one block over; may block while the device is far enough ahead;
- ``drain()``: return once everything handed over has been played (or cleared);
- ``clear()``: from any thread, drop buffered audio now (barge-in), waking a blocked
  ``write`` (its block is dropped; aplay's pipe write already under way may still go in) or ``drain``.

The players live in ``rkvoice.audio.sinks`` (null, wav, tee, the shared pacing) and
``rkvoice.audio.device_players`` (aplay, sounddevice, imported only when chosen).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from rkvoice.board.devices import has_sound_device
from rkvoice.config import Config
from rkvoice.errors import Stage
from rkvoice.needs import Needs, PackageNeed, ProgramNeed
from rkvoice.registry import Registry

log = logging.getLogger(__name__)


def aplay_needs(cfg: Config, **_: Any) -> Needs:
    return Needs(programs=(ProgramNeed("aplay", "apt-get install alsa-utils"),), devices=("sound-output",))


def sounddevice_needs(cfg: Config, **_: Any) -> Needs:
    return Needs(packages=(PackageNeed("sounddevice", "sounddevice"),), devices=("sound-output",),
                 profile=cfg.models.profile)


PLAYERS = Registry(Stage.PLAYER)
PLAYERS.register("aplay", "rkvoice.audio.device_players:AplayPlayer", "ALSA aplay subprocess (board default)",
                 install_hint="apt-get install alsa-utils", needs=aplay_needs)
PLAYERS.register("sounddevice", "rkvoice.audio.device_players:SounddevicePlayer", "PortAudio output stream",
                 "pip install sounddevice (and the PortAudio library)", needs=sounddevice_needs)
PLAYERS.register("wav", "rkvoice.audio.sinks:WavPlayer", "write a WAV file (--out)")
PLAYERS.register("null", "rkvoice.audio.sinks:NullPlayer", "discard audio at real-time pace")


class Player(Protocol):
    name: str
    rate: int

    def open(self) -> None: ...
    def write(self, block: np.ndarray) -> None: ...
    def drain(self) -> None: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...


def choose_player(cfg: Config, *, daemon: bool, device: Callable[[], str | None] | None = None,
                  warn: bool = True) -> str:
    """``audio.player``, with ``auto`` resolved: the sound device's player if there is one, else ``null``
    for the daemon (it must not grow a WAV file for weeks; a warning unless ``warn`` is False) or ``wav``
    for a command-line run. ``device`` replaces the sound-device probe."""
    name = cfg.audio.player
    if name != "auto":
        PLAYERS.backend(name)  # unknown names fail here, listing the choices
        return name
    found = (device or has_sound_device)()
    if found:
        return found
    if daemon and warn:
        log.warning("no sound device: answers are synthesised but not played (audio.player=null)")
    return "null" if daemon else "wav"
