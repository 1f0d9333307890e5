"""The configuration sections for Home Assistant: the Wyoming services server (``wyoming``), home commands
from the local assistant (``home_assistant``) and the board as an Assist satellite (``satellite``).
rkvoice.config puts them in ``Config`` beside the others."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from rkvoice.config_fields import ROOT, Section, num, one_of
from rkvoice.endpoint import parse_uri
from rkvoice.errors import RkvoiceError, Stage


def zone(name: str) -> tzinfo:
    """The IANA time zone ``name``, or an RkvoiceError naming the key and an example."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise RkvoiceError(Stage.CONFIG, "bad-value", f"wyoming.time_zone {name!r} is not a known IANA time zone "
                                                  "(e.g. Asia/Shanghai, Europe/Berlin); empty = the system's") from exc


@dataclass(frozen=True)
class WyomingConfig(Section):
    """The Wyoming server (``--wyoming URI``, or beside the microphone loop in the daemon)."""

    PATH = "wyoming"
    uri: str = ""
    """tcp://HOST:PORT or unix:///path, e.g. tcp://0.0.0.0:10300; empty = no server. The protocol has no
    authentication: anyone who can reach the port can use every service."""
    zeroconf: bool = False
    """Announce the TCP server as _wyoming._tcp on the local network (mDNS)."""
    max_audio_s: float = num(60.0, 0.0, 3600.0, lo_open=True)
    """Longest audio stream one request may send (transcribe or detect)."""
    idle_timeout_s: float = num(30.0, 0.0, 86_400.0, lo_open=True)
    """A connection that sends nothing for this long is closed."""
    max_event_bytes: int = num(1 << 20, 1024, 64 << 20)
    """Largest data or payload section of one event."""
    max_text_chars: int = num(4000, 1, 100_000)
    """Longest text of one synthesis (streamed or not) or one transcript to handle."""
    max_clients: int = num(32, 1, 1024)
    """Connections served at once; more are answered with an error and closed."""
    max_wake_streams: int = num(4, 1, 64)
    """Detect streams served at once (each has its own wake engine); more wait for one to end."""
    time_zone: str = ""
    """IANA time zone the served answers' clock uses (e.g. Asia/Shanghai); empty = the system's."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.uri:
            parse_uri(self.uri)
        if self.time_zone:
            zone(self.time_zone)


def _http_url(path: str, url: str) -> None:
    """Refuse a Home Assistant address that is not http(s)://HOST[:PORT][/path] (one line naming the form)."""
    parsed = urlparse(url)
    try:
        port_ok = parsed.port is None or parsed.port > 0
    except ValueError:
        port_ok = False
    if parsed.scheme not in ("http", "https") or not parsed.hostname or not port_ok or parsed.query:
        raise RkvoiceError(Stage.CONFIG, "bad-value", f"{path} {url!r} is not an http(s) address; use e.g. "
                           "http://homeassistant.local:8123 (empty = off)")


@dataclass(frozen=True)
class HomeAssistantConfig(Section):
    """Home commands from the local assistant: after the local tools, a question goes to Home Assistant's
    conversation agent; its spoken reply is the answer, and a question it does not understand goes on
    to the LLM (rkvoice.home)."""

    PATH = "home_assistant"
    url: str = ""
    """Home Assistant's address, e.g. http://homeassistant.local:8123; empty = off."""
    token_file: str = ""
    """File holding a long-lived access token (HA: profile -> security), readable by rkvoice only
    (chmod 600); empty = ha_token in the state directory, relative = under the install dir. The token
    itself never goes into a config file or a log line."""
    language: str = "zh-CN"
    """Conversation language sent with every question (HA's Chinese sentences are zh-CN)."""
    timeout_s: float = num(2.0, 0.0, 30.0, lo_open=True)
    """Longest wait for HA's answer; a slower or dead server is skipped and the LLM answers."""
    retry_s: float = num(30.0, 0.0, 3600.0)
    """After HA failed (unreachable, refused the token, answered an error or garbage), questions skip it
    for this long, then one question tries it again; 0: try every question."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.url:
            _http_url("home_assistant.url", self.url)
        if not self.language.strip():
            raise RkvoiceError(Stage.CONFIG, "bad-value", "home_assistant.language is empty; use a language HA "
                               "has sentences for, e.g. zh-CN")

    def token_path(self, state_dir: Path) -> Path:
        return ROOT / Path(self.token_file).expanduser() if self.token_file else state_dir / "ha_token"


def noise_key(text: str, path: str = "satellite.esphome.key") -> bytes:
    """The 32 bytes of a base64 key (as ESPHome's ``api: encryption: key:``), or an RkvoiceError naming the fix."""
    fix = "make one with: head -c 32 /dev/urandom | base64 (empty = no encryption)"
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise RkvoiceError(Stage.CONFIG, "bad-value", f"{path} is not base64; {fix}") from None
    if len(raw) != 32:
        raise RkvoiceError(Stage.CONFIG, "bad-value", f"{path} holds {len(raw)} bytes, not 32; {fix}")
    return raw


@dataclass(frozen=True)
class EsphomeConfig(Section):
    """The board as an ESPHome voice-assistant device (``satellite.protocol: esphome``; rkvoice.esphome)."""

    PATH = "satellite.esphome"
    port: int = num(6053, 0, 65535)
    """TCP port of the ESPHome native API, on satellite.uri's host (Home Assistant: Add integration ->
    ESPHome, this host and port); 0: a free port the system picks (logged)."""
    key: str = ""
    """Noise encryption key, base64 of 32 bytes as ESPHome's api: encryption: key: (make one with
    head -c 32 /dev/urandom | base64); with it only encrypted clients are served and Home Assistant asks
    for the key; empty = plain text, unless Home Assistant gave the device a key itself."""

    zeroconf: bool = True
    """Announce the device as _esphomelib._tcp on the local network (mDNS) so Home Assistant discovers it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.key:
            noise_key(self.key)


DEVICE_SOUNDS = ("wake", "thinking", "timer", "error")
"""The satellite's own sounds (rkvoice.satellite.sounds.Sound), each of which ``satellite.sounds`` can leave out."""


@dataclass(frozen=True)
class SatelliteConfig(Section):
    """The board as a Home Assistant Assist satellite (rkvoice.satellite): a Wyoming satellite, or an
    ESPHome voice-assistant device."""

    PATH = "satellite"
    uri: str = ""
    """tcp://HOST:PORT Home Assistant connects to, e.g. tcp://0.0.0.0:10700 (its own port, not wyoming.uri's:
    HA loads only the satellite role for an entry that announces one); empty = off."""
    name: str = "rkvoice"
    """The satellite device's name in Home Assistant."""
    area: str = ""
    """Area suggested to Home Assistant for the device (e.g. 客厅); empty = none."""
    protocol: str = one_of("wyoming", "esphome")
    """How Home Assistant reaches the satellite: wyoming (the Wyoming satellite role at satellite.uri) or
    esphome (an ESPHome voice-assistant device on satellite.uri's host at satellite.esphome.port)."""
    stop_words: str = "停,别说了,stop"
    """Phrases that, said alone while the board plays something (a reply, an announcement, a ringing
    timer, music), stop it without the wake phrase; comma-separated; empty = no stop word."""
    sounds: str = ",".join(DEVICE_SOUNDS)
    """The device's own sounds that play, comma-separated: wake (the wake acknowledgement, hear.ack),
    thinking (a soft blip when the request has ended and the answer is awaited), timer (a finished timer
    rings after its words; without it the words are said once), error (two falling notes when a request
    fails); empty = none."""
    esphome: EsphomeConfig = field(default_factory=EsphomeConfig)

    @property
    def sound_names(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.sounds.replace("，", ",").split(",") if p.strip())

    @property
    def stop_phrases(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.stop_words.replace("，", ",").split(",") if p.strip())

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.uri:
            try:
                endpoint = parse_uri(self.uri)
            except RkvoiceError as exc:
                raise RkvoiceError(Stage.CONFIG, "bad-value", f"satellite.uri {self.uri!r} is not tcp://HOST:PORT; "
                                   "use e.g. tcp://0.0.0.0:10700 (empty = off)") from exc
            if endpoint.scheme != "tcp":
                raise RkvoiceError(Stage.CONFIG, "bad-value", f"satellite.uri {self.uri!r}: Home Assistant reaches "
                                   "a satellite over TCP only; use e.g. tcp://0.0.0.0:10700")
        if bad := [p for p in self.stop_phrases if not re.search(r"[\u4e00-\u9fffA-Za-z]", p)]:
            raise RkvoiceError(Stage.CONFIG, "bad-value", f"satellite.stop_words: {bad[0]!r} has no word to say; "
                               "give Chinese characters or English words, comma-separated (e.g. 停,别说了,stop), "
                               "or leave it empty for no stop word")
        if bad := [name for name in self.sound_names if name not in DEVICE_SOUNDS]:
            raise RkvoiceError(Stage.CONFIG, "bad-value", f"satellite.sounds: {bad[0]!r} is not one of the device's "
                               f"sounds; choose from {', '.join(DEVICE_SOUNDS)} (comma-separated; empty = none)")
        if not self.name.strip():
            raise RkvoiceError(Stage.CONFIG, "bad-value", "satellite.name is empty; give the device a name, "
                               "e.g. rkvoice")
