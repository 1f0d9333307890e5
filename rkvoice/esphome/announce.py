"""The ESPHome device on the local network: ``_esphomelib._tcp`` over mDNS (rkvoice.wyoming.discovery's
Announcer), with the TXT fields Home Assistant's ESPHome discovery reads: ``mac`` (required: it finds the
config entry by it), ``friendly_name``, ``version``, the project, and ``api_encryption`` when the device
needs a key (HA's discovery flow then asks for it; without one ``api_encryption_supported``). Best effort:
without multicast one warning line, and the device is added by host and port."""

from __future__ import annotations

from rkvoice.wyoming.discovery import Announcer

from .framing import NOISE_NAME
from .server import ESPHOME_VERSION, PROJECT_NAME, DeviceInfo

SERVICE = "_esphomelib._tcp.local."


def txt(info: DeviceInfo, encrypted: bool) -> dict[str, str]:
    fields = {"mac": info.mac, "friendly_name": info.friendly_name, "version": ESPHOME_VERSION,
              "project_name": PROJECT_NAME, "project_version": info.version, "platform": "HOST", "board": "host",
              "network": "ethernet"}
    fields["api_encryption" if encrypted else "api_encryption_supported"] = NOISE_NAME.decode()
    return fields


def announcer(info: DeviceInfo, host: str, port: int, encrypted: bool) -> Announcer:
    return Announcer(info.name, host, port, SERVICE, txt(info, encrypted), server=f"{info.name}.local.")
