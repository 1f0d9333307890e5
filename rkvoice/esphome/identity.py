"""Who the ESPHome device is, and what it keeps across restarts (under the state directory).

- The MAC: Home Assistant makes it the config entry's id and every entity id's prefix, so it must be
  stable and unique. It is derived once (from /etc/machine-id and the satellite's name, as a locally
  administered address; random without a machine id) and stored, so it never changes afterwards.
- The device name: ESPHome's ``name`` (lowercase letters, digits, hyphens), made once from
  ``satellite.name`` (a name with no such characters, e.g. Chinese, becomes ``rkvoice-`` + the MAC's
  last 6 digits) and stored: Home Assistant expects the same name on every reconnect, so renaming the
  satellite changes only ``friendly_name`` (``satellite.name`` itself).
- The Noise key Home Assistant gave the device (NoiseEncryptionSetKeyRequest): in ``esphome_key``
  (base64, mode 0600, written atomically), used from the next connection. A key in the config
  (``satellite.esphome.key``) is the user's and wins; HA may not replace it.
- The mute switch's state and the active wake words chosen in Home Assistant.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkvoice.atomic import write_atomic
from rkvoice.config import Config
from rkvoice.config_ha import noise_key
from rkvoice.endpoint import parse_uri
from rkvoice.errors import RkvoiceError
from rkvoice.satellite.info import bind_note
from rkvoice.state import StateStore

log = logging.getLogger(__name__)

DOC = "esphome"
"""The state document (esphome.json): mac, muted, active wake words."""
KEY_FILE = "esphome_key"
MACHINE_ID = Path("/etc/machine-id")


def derive_mac(name: str, machine_id: Path = MACHINE_ID) -> str:
    """12 lowercase hex digits: a locally administered unicast address from the machine id and ``name``
    (random when the machine has no id)."""
    try:
        seed = machine_id.read_bytes().strip()
    except OSError:
        seed = b""
    raw = bytearray(hashlib.sha256(b"rkvoice-esphome\0" + seed + b"\0" + name.encode()).digest()[:6]
                    if seed else secrets.token_bytes(6))
    raw[0] = (raw[0] & 0xFC) | 0x02  # locally administered, unicast
    return raw.hex()


def device_name(friendly: str, mac: str) -> str:
    """ESPHome's device name from ``satellite.name``."""
    slug = re.sub(r"[^a-z0-9]+", "-", friendly.lower()).strip("-")[:24].strip("-")
    return slug or f"rkvoice-{mac[-6:]}"


def colon_mac(mac: str) -> str:
    """``aabbccddeeff`` -> ``AA:BB:CC:DD:EE:FF`` (DeviceInfo's form)."""
    return ":".join(mac[i : i + 2] for i in range(0, 12, 2)).upper()


@dataclass
class DeviceState:
    """What the device keeps: loaded once, saved on every change (atomically)."""

    store: StateStore
    mac: str
    name: str = ""
    muted: bool = False
    active_wake_words: list[str] = field(default_factory=list)

    def save(self) -> None:
        try:
            self.store.save(DOC, {"mac": self.mac, "name": self.name, "muted": self.muted,
                                  "active_wake_words": self.active_wake_words})
        except (OSError, RkvoiceError) as exc:
            log.warning("esphome: cannot save the device state (%s); it is lost at the next restart", exc)


def load_state(cfg: Config, state_dir: Path | None = None) -> DeviceState:
    """The stored state; the first time, a new MAC and name are made and stored."""
    store = StateStore(state_dir or cfg.state.path)
    doc: Any = store.load(DOC, {})
    doc = doc if isinstance(doc, dict) else {}
    mac = doc.get("mac")
    state = DeviceState(store, mac if isinstance(mac, str) and re.fullmatch(r"[0-9a-f]{12}", mac) else "")
    name = doc.get("name")
    state.name = name if isinstance(name, str) and re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", name) else ""
    state.muted = doc.get("muted") is True
    words = doc.get("active_wake_words")
    state.active_wake_words = [w for w in words if isinstance(w, str)] if isinstance(words, list) else []
    if not state.mac or not state.name:
        state.mac = state.mac or derive_mac(cfg.satellite.name)
        state.name = state.name or device_name(cfg.satellite.name, state.mac)
        log.info("esphome: the device is %r, MAC %s (stored; Home Assistant knows the device by them)",
                 state.name, colon_mac(state.mac))
        state.save()
    return state


class KeyStore:
    """The device's Noise key: the config's, else the one Home Assistant set (stored), else none."""

    def __init__(self, cfg: Config, state_dir: Path | None = None) -> None:
        self.configured = noise_key(cfg.satellite.esphome.key) if cfg.satellite.esphome.key else None
        self.path = (state_dir or cfg.state.path) / KEY_FILE

    def current(self) -> bytes | None:
        """The key a new connection needs (read each time: a key set by HA counts from the next connection)."""
        if self.configured is not None:
            return self.configured
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("esphome: cannot read the stored key %s (%s); serving plain text", self.path, exc)
            return None
        try:
            return noise_key(text, str(self.path))
        except RkvoiceError as exc:
            log.warning("esphome: %s; serving plain text", exc)
            return None

    def set(self, key: bytes) -> bool:
        """Home Assistant's NoiseEncryptionSetKeyRequest: 32 raw bytes or their base64; empty removes the
        stored key. False (one line) when refused."""
        if self.configured is not None:
            log.warning("esphome: Home Assistant tried to set the encryption key; satellite.esphome.key is set "
                        "in the config and stays (change it there)")
            return False
        if not key:
            try:
                self.path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("esphome: cannot remove the stored key %s (%s)", self.path, exc)
                return False
            log.info("esphome: Home Assistant removed the encryption key; plain text from the next connection")
            return True
        raw = key if len(key) == 32 else None
        if raw is None:
            try:
                decoded = base64.b64decode(key, validate=True)
            except ValueError:
                decoded = b""
            raw = decoded if len(decoded) == 32 else None
        if raw is None:
            log.warning("esphome: Home Assistant sent an encryption key of %d bytes (not 32, nor their base64); "
                        "refused", len(key))
            return False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, base64.b64encode(raw) + b"\n", durable=True, mode=0o600)
        except OSError as exc:
            log.warning("esphome: cannot store the encryption key in %s (%s); refused", self.path, exc)
            return False
        log.info("esphome: Home Assistant set an encryption key (stored in %s); encrypted from the next "
                 "connection", self.path)
        return True



def check_notes(cfg: Config) -> list[str]:
    """``--check``'s lines on the ESPHome device: its port, and a warning without a key."""
    host = parse_uri(cfg.satellite.uri).host
    notes = [bind_note(host, cfg.satellite.esphome.port, f"add it in Home Assistant (Add integration -> ESPHome, "
                       f"this host and port) as {cfg.satellite.name!r}")]
    if KeyStore(cfg).current() is None:
        notes.append("warning: no encryption key: anyone who reaches the port can use the device; set "
                     "satellite.esphome.key to the output of: head -c 32 /dev/urandom | base64 (and type it into "
                     "Home Assistant's ESPHome setup)")
    return notes
