"""The board as an ESPHome voice-assistant device (``satellite.protocol: esphome``): the native API Home
Assistant's ESPHome integration speaks, as an adapter over the one satellite core (rkvoice.satellite.core).

framing (plain-text and Noise frames) -> server (the API connection: hello, device info, entities, keys)
-> voice (the voice assistant: the core's port, Home Assistant's events, replies and announcements by URL);
identity (MAC, name, stored key and choices), entities (mute switch, wake words), media_entity (the media
player), reply_stream (Home Assistant's audio by URL, played as it arrives).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rkvoice.config import Config
    from rkvoice.satellite.run import LinkFactory


def link_for(cfg: Config) -> LinkFactory | None:
    """The satellite's protocol adapter ``satellite.protocol`` names: the ESPHome device's EsphomeLink
    (imported only when chosen), or None: the satellite's own default, Wyoming's SatelliteLink."""
    if cfg.satellite.protocol == "esphome":
        from .voice import EsphomeLink

        return EsphomeLink
    return None
