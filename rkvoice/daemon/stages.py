"""What the daemon hosts: its resident engines (stages), and the microphone the turn loop listens to.

The supervisor (service.py) loads each stage once (``StageSpec.build`` then ``load()``), reloads a
stage on SIGHUP only when its part of the config changed, and runs the product's one turn loop over
the loaded engines (product.py). Tests and the soak pass stages of scripted fake engines and a
scripted audio source; the loop is the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rkvoice.config import Config
from rkvoice.hear.sources import AudioSource


@dataclass(frozen=True)
class StageSpec:
    """One resident engine: which config it depends on and how to build it (unloaded)."""

    name: str
    key: Callable[[Config], Any]
    """The part of the config the engine depends on; a change reloads it on SIGHUP."""
    build: Callable[[Config], Any]
    """Returns the engine, not yet loaded (``load()`` does the heavy work)."""


@dataclass(frozen=True)
class Plan:
    """Everything the daemon runs: the "hear", "answer" and "speak" stages and the audio source."""

    stages: tuple[StageSpec, ...]
    source: Callable[[Config], AudioSource]
    """Opens the microphone (or a scripted stand-in); raises RkvoiceError("audio", "device-...")."""
