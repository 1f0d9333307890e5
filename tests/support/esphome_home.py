"""rkvoice as an ESPHome voice device of a real Home Assistant (tests/ha_home.py), for
tests/test_esphome_e2e.py and bench/satellite_latency.py: rkvoice's Wyoming services are the
speech-to-text and text-to-speech of HA's preferred pipeline (tests/support/satellite_home.py's
``rkvoice_services``), and the satellite runs with ``satellite.protocol: esphome`` on a free loopback port,
added by HA's esphome config flow over REST (host and port; then the encryption key when it has one), the
device's assistant select set to that pipeline. Its microphone (``LiveMic``) hears what the test says into
it in real time; its wake engine is the configured one on the real ASR.

    with esphome_home(work, asr, voice, ha=ha, key=KEY) as home:   # added, HA runs its voice assistant
        run = home.ask("打开大灯")         # said after 小智小智 + a pause; the run once its reply played
        home.select("wake_word")           # the entity id of the device's wake-word select
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.ha_home import HomeHa, home_ha
from tests.support.satellite_home import (
    LiveMic,
    SatelliteHome,
    WakeOnly,
    board,
    home_config,
    local_listener,
    rkvoice_services,
    stop_board,
)


@dataclass
class EsphomeHome(SatelliteHome):
    entry_id: str = ""
    """The device's esphome config entry."""
    by_key: dict[str, str] = field(default_factory=dict)
    """The entry's entity ids by their key (the unique id after the MAC): pipeline, wake_word,
    vad_sensitivity, assist_satellite, mute..."""
    sent: list[Any] = field(default_factory=list)
    """Every message the device sent Home Assistant's voice assistant (requests, audio, AnnounceFinished)."""

    @property
    def link(self) -> Any:
        """rkvoice.esphome.voice.EsphomeLink"""
        return self.satellite.link

    def select(self, key: str) -> str:
        return self.by_key[key]

    def requests(self) -> list[Any]:
        """The VoiceAssistantRequests the device sent that started a run."""
        return [m for m in self.sent if type(m).__name__ == "VoiceAssistantRequest" and m.start]


def add_esphome(ha: HomeHa, port: int, key: str | None = None) -> dict[str, Any]:
    """HA's esphome config flow over REST for 127.0.0.1:``port``; the encryption key step answered with
    ``key`` when HA asks for one. The flow's last answer (``type`` create_entry with ``result``, or the form
    with its ``errors``); a flow left at a form is removed."""
    flow = ha.rest("POST", "/api/config/config_entries/flow", {"handler": "esphome"})
    got = ha.rest("POST", f"/api/config/config_entries/flow/{flow['flow_id']}", {"host": "127.0.0.1", "port": port})
    if got.get("type") == "form" and got.get("step_id") == "encryption_key" and key is not None:
        got = ha.rest("POST", f"/api/config/config_entries/flow/{flow['flow_id']}", {"noise_psk": key})
    if got.get("type") == "form":
        ha.rest("DELETE", f"/api/config/config_entries/flow/{flow['flow_id']}")
    return dict(got)


def entry_entities(ha: HomeHa, entry_id: str, keys: set[str], timeout: float = 60.0) -> dict[str, str]:
    """The entry's {key: entity_id} once every one of ``keys`` is registered."""
    deadline = time.monotonic() + timeout
    with ha.ws() as sock:
        while True:
            found = {str(e.get("unique_id", "")).rsplit("-", 1)[-1]: e["entity_id"]
                     for e in sock.call("config/entity_registry/list") if e.get("config_entry_id") == entry_id}
            found.update({e.split(".")[0]: e for e in list(found.values())})
            if keys <= found.keys() or time.monotonic() > deadline:
                assert keys <= found.keys(), f"entry {entry_id} has {sorted(found)}, not {sorted(keys)}\n{ha.log()}"
                return found
            time.sleep(0.2)


def preferred_pipeline_name(ha: HomeHa) -> str:
    with ha.ws() as sock:
        listed = sock.call("assist_pipeline/pipeline/list")
        return str(next(p["name"] for p in listed["pipelines"] if p["id"] == listed["preferred_pipeline"]))


def wait_running(home: EsphomeHome, timeout: float = 60.0) -> None:
    """Until HA runs the device's voice assistant (subscribed, the satellite running)."""
    assert home.link.running.wait(timeout), f"HA did not run the ESPHome device\n{home.ha.log()}"


@contextlib.contextmanager
def esphome_home(work: Path, asr: Any, voice: Any, ha: HomeHa | None = None, key: str | None = None,
                 local: bool = False, services: bool = True, name: str = "rkvoice",
                 wake_phrases: dict[str, str] | None = None, player: Any = None) -> Iterator[EsphomeHome]:
    """HA (``ha``, else one started here) with rkvoice's services in its preferred pipeline (unless
    ``services`` is False: another home put them there) and the ESPHome device ``name`` added (with
    ``key``: satellite.esphome.key) and run by HA. ``local``: the satellite as the daemon runs it
    (SatelliteListener: the local assistant answers while HA is away). ``wake_phrases``: more phrases the
    device offers HA (id -> phrase; the wake engine still wakes on hear.wake_phrase)."""
    from rkvoice.esphome import link_for
    from rkvoice.satellite.run import Satellite, board_vad

    with contextlib.ExitStack() as started:
        if ha is None:
            ha = started.enter_context(home_ha(work / "ha"))
        cfg = esphome_config(home_config(ha, work, name=name, protocol="esphome"), key)
        if services:
            started.enter_context(rkvoice_services(cfg, work, ha, asr, voice))
        wake, speak = board(cfg, asr, voice, player)
        mic = LiveMic()
        reports: list[Any] = []
        listener: Any = None
        if local:
            listener = local_listener(cfg, work, asr, wake, speak, mic, reports)
            satellite = listener.satellite
            listening = threading.Thread(target=listener.run, name="esphome-listener", daemon=True)
        else:
            satellite = Satellite(cfg, WakeOnly(wake, asr), speak, segmenter=board_vad(cfg), link=link_for(cfg))
            satellite.start()
            listening = threading.Thread(target=satellite.run, args=(mic,), name="esphome-mic", daemon=True)
        link = satellite.link
        link.wake_words.phrases.update(wake_phrases or {})
        sent: list[Any] = []
        send = link._send

        def spy(*messages: Any) -> None:
            sent.extend(messages)
            send(*messages)

        link._send = spy
        try:
            listening.start()
            got = add_esphome(ha, link.port, key)
            assert got.get("type") == "create_entry", f"the esphome flow ended with {got}\n{ha.log()}"
            entry_id = got["result"]["entry_id"]
            by_key = entry_entities(ha, entry_id, {"pipeline", "wake_word", "assist_satellite"})
            ha.rest("POST", "/api/services/select/select_option",
                    {"entity_id": by_key["pipeline"], "option": preferred_pipeline_name(ha)})
            home = EsphomeHome(ha, satellite, mic, speak, voice, asr, {"assist_satellite": by_key["assist_satellite"]},
                               listener, reports, entry_id=entry_id, by_key=by_key, sent=sent)
            wait_running(home)
            yield home
        finally:
            stop_board(mic, listener or satellite, listening, speak)


def esphome_config(cfg: Any, key: str | None) -> Any:
    """satellite.esphome: a free port the system picks, no mDNS, ``key``."""
    from dataclasses import replace

    esphome = replace(cfg.satellite.esphome, port=0, zeroconf=False, key=key or "")
    return replace(cfg, satellite=replace(cfg.satellite, esphome=esphome))
